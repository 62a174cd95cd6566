"""An LLM edit whose effect on the check the code cannot decide (issue #27 item 6).

The attention registry refuses ``trtllm_mla`` for a model that does not use MLA
("trtllm_mla backend can only be used with MLA models."): the check reads
``runner.use_mla_backend``, which no log line, flag or model fact gives, and the engine
proposes no fix. An edit of the model's that the verifier can neither confirm
nor refute is kept, labelled unverified, and never recommended; one that would leave the
check firing, or names a flag the release lacks, is still rejected."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.engine.llm.writer import assist
from service.settings import Settings
from tests.llm_stub import ScriptedLLM
from tests.service.engine.llm.cases import assist_case

RELEASE = "0.5.23"
MESSAGE = "trtllm_mla backend can only be used with MLA models."
LOG = (
    f"$ python -m sglang.launch_server --model-path org/some-model --attention-backend "
    f"trtllm_mla\nAssertionError: {MESSAGE}\n"
)


@pytest.fixture(scope="module")
def case(kb):
    result, ctx = assist_case(kb, LOG, RELEASE, None)
    assert result.status == "located" and ctx.check is not None
    assert result.location.path.endswith("attention_registry.py")
    assert result.evaluation.fired == "unknown" and not result.fixes
    return result, ctx


@pytest.fixture(scope="module")
def stub() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def _settings(stub: ScriptedLLM) -> Settings:
    return Settings(
        llm_base_url=stub.base_url,
        llm_model="scripted-model",
        llm_api_key="sk-x",
        llm_timeout_s=30.0,
    )


def test_an_undecidable_edit_is_kept_unverified_and_never_recommended(case, stub) -> None:
    result, ctx = case
    stub.push(
        content={
            "summary": "Not an MLA model.",
            "explanation": "Use another backend.",
            "edits": [
                {"set": {"--attention-backend": "flashinfer"}, "remove": []},
                {"set": {"--no-such-flag": 1}, "remove": []},
            ],
        }
    )
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    mine = [f for f in out.fixes if f.origin == "llm"]
    (fix,) = mine
    assert fix.fixes_check == "unknown" and not fix.recommended
    assert fix.verdict.startswith("proposed by the model, unverified")
    assert fix.argv[fix.argv.index("--attention-backend") + 1] == "flashinfer"
    assert out.llm.unverified == [fix.rank] and out.llm.used is True
    reasons = {r.item: r.reason for r in out.llm.rejected}
    assert any(
        "--no-such-flag" in k and "not a flag of SGLang 0.5.23" in v for k, v in reasons.items()
    )
    # the deterministic recommendation, if any, is unchanged
    assert [f.command for f in out.fixes if f.recommended] == [
        f.command for f in result.fixes if f.recommended
    ]
