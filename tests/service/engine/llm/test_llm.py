"""The LLM layer against a scripted OpenAI-compatible server (real HTTP on loopback).

The triage result is the real engine's, on the seed crash of 0.5.11 (the bare
assert in ``ServerArgs._handle_speculative_decoding``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from evals.render import render_log
from service.engine.answer import RuleVerdict, TriageResult
from service.engine.llm.checks import check_text
from service.engine.llm.prompt import AssistContext, Snippet, build_snippets, context_from_result
from service.engine.llm.writer import assist
from service.engine.triage import Engine
from service.settings import Settings
from tests.llm_stub import ScriptedLLM
from tests.service.engine.llm.cases import assist_case

RELEASE = "0.5.11"
HARDWARE = "rtx-pro-6000-x8"
ARGV = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/d",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]
CHECK_CITE = "0.5.11:sglang/srt/server_args.py:3519-3522"


@pytest.fixture(scope="module")
def seed(kb) -> tuple[TriageResult, AssistContext]:
    """The engine's result and the context the engine would hand to :func:`assist`."""
    check = next(
        c
        for c in kb.store.checks(RELEASE, function="ServerArgs._handle_speculative_decoding")
        if c.bare and "speculative_eagle_topk is None" in c.condition
    )
    log = render_log(kb.store, RELEASE, check, python="3.12", argv=ARGV)
    result, ctx = assist_case(kb, log, RELEASE, HARDWARE)
    assert ctx.check is not None and ctx.check.id == check.id
    return result, ctx


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as stub:
        yield stub


@pytest.fixture()
def stub(server: ScriptedLLM) -> ScriptedLLM:
    server.replies.clear()
    server.requests.clear()
    server.answered.clear()
    return server


def _settings(stub: ScriptedLLM, timeout: float = 10.0) -> Settings:
    return Settings(
        llm_base_url=stub.base_url,
        llm_model="scripted-model",
        llm_api_key="sk-test",
        llm_timeout_s=timeout,
    )


def _ids(snippets: list[Snippet]) -> dict[str, str]:
    """Handy ids: the check, the topk test atom, the guard on --speculative-num-steps."""
    out = {"check": next(s.id for s in snippets if s.kind == "check")}
    out["topk"] = next(
        s.id
        for s in snippets
        if s.kind == "evaluation" and "`self.speculative_eagle_topk is None`" in s.text
    )
    out["steps"] = next(
        s.id
        for s in snippets
        if s.kind == "guard" and s.text.startswith("self.speculative_num_steps is None")
    )
    return out


def _answer(
    explanation: str,
    edits: list[dict[str, Any]] | None = None,
    summary: str = "EAGLE3 draft sizes were given without --speculative-num-steps, "
    "which this release's bare assert forbids.",
) -> dict[str, Any]:
    return {"summary": summary, "explanation": explanation, "edits": edits or []}


def _good_explanation(ids: dict[str, str]) -> str:
    return (
        f"The bare assert in `_handle_speculative_decoding` fired [{ids['check']}].\n\n"
        f"- `--speculative-num-steps` was not given, so the branch ran [{ids['steps']}].\n"
        f"- `--speculative-eagle-topk 4` is set, so the assert's test is false "
        f"[{ids['topk']}, {ids['check']}]."
    )


def _llm_fixes(result: TriageResult) -> list:
    return [f for f in result.fixes if f.origin == "llm"]


def _reasons(result: TriageResult) -> list[str]:
    return [r.reason for r in result.llm.rejected]


# -- (a) a good answer ------------------------------------------------------------------
def test_good_answer_is_used_with_real_citations(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    stub.push(
        content=_answer(
            _good_explanation(ids), [{"set": {"--speculative-num-steps": 4}, "remove": []}]
        )
    )
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert out.llm.used is True and out.llm.explanation == "accepted"
    assert out.llm.rejected == []
    assert out.summary.startswith("EAGLE3 draft sizes")
    # [S..] rewritten to our own release:path:line citations
    assert "[S" not in out.explanation
    assert f"[`{CHECK_CITE}`]" in out.explanation
    assert "ran [`0.5.11:sglang/srt/server_args.py:3518`]" in out.explanation
    assert CHECK_CITE in out.citations and "0.5.11:sglang/srt/server_args.py:3518" in out.citations
    # the model's fix (a steps value the engine does not list itself) passed the verifier and
    # is added; the deterministic one stays recommended
    (llm_fix,) = _llm_fixes(out)
    assert llm_fix.set == {"--speculative-num-steps": 4} and llm_fix.fixes_check == "true"
    assert not llm_fix.trips and not llm_fix.recommended
    assert llm_fix.argv[-2:] == ["--speculative-num-steps", "4"]
    assert out.fixes[0].recommended and out.fixes[0].origin != "llm"
    assert "**Verified fix**" in out.explanation and out.fixes[0].command in out.explanation
    assert out.llm.deterministic_explanation == result.explanation


def test_request_holds_the_snippets_but_no_line_numbers(seed, stub) -> None:
    result, ctx = seed
    snippets = build_snippets(result, ctx)
    stub.push(content=_answer(_good_explanation(_ids(snippets))))
    assist(result, engine_ctx=ctx, settings=_settings(stub))
    (body,) = stub.requests
    assert body["model"] == "scripted-model"
    assert body["response_format"]["type"] == "json_schema"
    text = "\n".join(m["content"] for m in body["messages"])
    for s in snippets:
        assert f"[{s.id}] {s.kind}:" in text
    assert "speculative_eagle_topk is None" in text and "--speculative-eagle-topk 4" in text
    # no file line numbers anywhere in what the model read, so none to repeat
    assert not re.search(r"\.py:\d+", text)
    assert not re.search(r"\blines?\s+\d+", text, re.I)
    for line in (3519, 3518, 3447, 2930):
        assert str(line) not in text
    assert result.location.citation not in text


def test_model_fix_is_recommended_only_when_no_deterministic_one_is(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    unrecommended = result.model_copy(
        update={"fixes": [f.model_copy(update={"recommended": False}) for f in result.fixes]}
    )
    stub.push(
        content=_answer(
            _good_explanation(ids), [{"set": {"--speculative-num-steps": "4"}, "remove": []}]
        )
    )
    out = assist(unrecommended, engine_ctx=ctx, settings=_settings(stub))
    (llm_fix,) = _llm_fixes(out)
    assert llm_fix.recommended and llm_fix.set == {"--speculative-num-steps": 4}
    assert [f.recommended for f in out.fixes].count(True) == 1


def test_edit_equal_to_a_deterministic_fix_is_not_repeated(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    top = result.fixes[0]
    stub.push(content=_answer(_good_explanation(ids), [{"set": top.set, "remove": top.remove}]))
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert not _llm_fixes(out) and out.llm.agrees_with == [top.rank]


# -- (b) a hallucinated flag ------------------------------------------------------------
def test_hallucinated_flag_is_dropped(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    text = (
        _good_explanation(ids)
        + f"\n\nSetting --speculative-magic 3 also avoids it [{ids['check']}]."
    )
    stub.push(content=_answer(text, [{"set": {"--speculative-magic": 3}, "remove": []}]))
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert not _llm_fixes(out)
    items = {r.item: r.reason for r in out.llm.rejected}
    assert (
        items["edit: set --speculative-magic 3"]
        == "--speculative-magic: not a flag of SGLang 0.5.11"
    )
    assert any("--speculative-magic" in r and "not a flag" in r for r in _reasons(out))
    assert "speculative-magic" not in out.explanation
    assert out.llm.used is True and out.fixes[0].recommended


# -- (c) a fake citation ----------------------------------------------------------------
def test_fake_citation_sentence_is_rejected(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    text = _good_explanation(ids) + "\n\nThis was a known bug fixed upstream [S99]."
    stub.push(content=_answer(text))
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert "known bug" not in out.explanation and "S99" not in out.explanation
    assert "cites S99, which is not one of the snippets given" in _reasons(out)
    assert out.llm.used is True


def test_explanation_citing_only_fake_ids_keeps_the_deterministic_answer(seed, stub) -> None:
    result, ctx = seed
    stub.push(content=_answer("The assert fired [S99]. It is a known bug [S123]."))
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert out.explanation == result.explanation and out.summary == result.summary
    assert out.llm.used is False and out.llm.explanation == "rejected"
    assert "its explanation was rejected" in _reasons(out)


def test_line_numbers_and_diffs_are_stripped(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    text = (
        _good_explanation(ids)
        + f"\n\nThe assert is at server_args.py:3519 [{ids['check']}]."
        + f" See line 3520 for the test [{ids['topk']}]."
        + "\n\n```diff\n-            assert (\n+            if x:\n```"
        + "\n@@ -3519,4 +3519,4 @@"
    )
    stub.push(content=_answer(text))
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert "3520" not in out.explanation and "server_args.py:3519 [" not in out.explanation
    assert "```diff" not in out.explanation and "@@" not in out.explanation
    reasons = _reasons(out)
    assert "claims a file:line location" in reasons and "claims a line number" in reasons
    assert "contains a diff" in reasons and "contains a diff line" in reasons
    assert out.llm.used is True and f"[`{CHECK_CITE}`]" in out.explanation


# -- (d) a fix that trips a check / violates a rule -------------------------------------
def test_fix_that_trips_another_check_is_rejected(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    # the backend is given: SGLang would resolve one left unset before the check asks it
    edit = {
        "set": {"--speculative-num-steps": 3, "--page-size": 16, "--attention-backend": "triton"},
        "remove": [],
    }
    stub.push(content=_answer(_good_explanation(ids), [edit]))
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert not _llm_fixes(out)
    (reason,) = _reasons(out)
    assert reason.startswith(
        "fixes the check, but then ServerArgs._handle_speculative_decoding at "
        "0.5.11:sglang/srt/server_args.py:"
    )
    assert reason.endswith("would fire")
    assert out.fixes[0].recommended and out.fixes[0].origin != "llm"
    assert "--page-size" not in out.fixes[0].command


def test_fix_that_violates_a_rule_is_rejected(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    calls: list[list[str]] = []

    def rule_check(argv: list[str]) -> tuple[list[RuleVerdict], bool]:
        calls.append(argv)
        bad = "--speculative-num-steps" in argv
        return [
            RuleVerdict(
                rule="eagle-steps-with-topk",
                severity="error",
                verdict="violated" if bad else "satisfied",
                reason="topk > 1 needs num-steps >= topk" if bad else "",
            )
        ], bad

    ctx_rules = dataclasses.replace(ctx, rule_check=rule_check)
    unrecommended = result.model_copy(
        update={"fixes": [f.model_copy(update={"recommended": False}) for f in result.fixes]}
    )
    stub.push(
        content=_answer(
            _good_explanation(ids), [{"set": {"--speculative-num-steps": 4}, "remove": []}]
        )
    )
    out = assist(unrecommended, engine_ctx=ctx_rules, settings=_settings(stub))
    assert calls and calls[0][-2:] == ["--speculative-num-steps", "4"]
    assert not _llm_fixes(out) and not any(f.recommended for f in out.fixes)
    assert _reasons(out) == ["violates eagle-steps-with-topk: topk > 1 needs num-steps >= topk"]


def test_fix_that_leaves_the_check_firing_is_rejected(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    stub.push(
        content=_answer(
            _good_explanation(ids),
            [
                {"set": {"--tp": 4}, "remove": []},
                {"set": {"--speculative-eagle-topk": "many"}, "remove": []},
            ],
        )
    )
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert not _llm_fixes(out)
    reasons = _reasons(out)
    assert reasons[0] == "the check would still fire"
    assert reasons[1].startswith(
        "the edited command does not parse: argument --speculative-eagle-topk"
    )


# -- (e) a hang, an error, no endpoint --------------------------------------------------
def test_hang_falls_back_within_the_deadline(seed, stub) -> None:
    """The LLM's answer is held until after ``assist`` returned: the answer came from the
    deadline, not from the reply (order, not wall-clock)."""
    result, ctx = seed
    held = threading.Event()
    stub.push(hold=held, content=_answer("late [S1]"))
    first = len(stub.requests)
    try:
        out = assist(result, engine_ctx=ctx, settings=_settings(stub, timeout=1.5))
        assert len(stub.requests) == first + 1  # asked once, and
        assert first not in stub.answered  # returned while the reply was still held
    finally:
        held.set()
    assert out.llm.used is False and out.llm.error == "no answer within 1.5s"
    assert out.explanation == result.explanation and out.fixes == result.fixes
    assert len(stub.requests) == 1


def test_endpoint_error_keeps_the_deterministic_answer(seed, stub) -> None:
    result, ctx = seed
    stub.push(status=500)
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert out.llm.used is False and "500" in out.llm.error
    assert out.explanation == result.explanation and out.summary == result.summary


def test_answer_not_matching_the_schema_is_an_error(seed, stub) -> None:
    result, ctx = seed
    stub.push(content="I think the assert fired because of topk.")
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert out.llm.used is False and out.llm.error.startswith("the answer did not match")
    assert out.explanation == result.explanation


def test_fenced_json_from_a_server_ignoring_response_format_is_parsed(seed, stub) -> None:
    result, ctx = seed
    ids = _ids(build_snippets(result, ctx))
    stub.push(content="```json\n" + json.dumps(_answer(_good_explanation(ids))) + "\n```")
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert out.llm.used is True and f"[`{CHECK_CITE}`]" in out.explanation


def test_no_endpoint_means_nothing_happens(seed, stub) -> None:
    result, ctx = seed
    out = assist(result, engine_ctx=ctx, settings=Settings(llm_base_url=None, llm_model=None))
    assert out is result and out.llm is None and stub.requests == []


def test_check_text_keeps_clean_sentences() -> None:
    text = "Fired [S1]. Bad [S7]. Also `--tp 8` [S2].\n\n```\npython -m x --tp 8\n```"
    clean, rejected = check_text(text, {"S1", "S2"}, {"--tp"})
    assert clean == "Fired [S1]. Also `--tp 8` [S2].\n\n```\npython -m x --tp 8\n```"
    assert rejected == [
        {"item": "Bad [S7].", "reason": "cites S7, which is not one of the snippets given"}
    ]


def test_snippets_cite_our_own_data(seed) -> None:
    result, ctx = seed
    snippets = build_snippets(result, ctx)
    assert [s.id for s in snippets] == [f"S{i}" for i in range(1, len(snippets) + 1)]
    known = set(result.citations) | {result.location.citation}
    for s in snippets:
        assert s.citation is None or s.citation.startswith("0.5.11:sglang/")
        if s.kind in ("declaration", "write"):
            assert s.citation in known
    steps_atom = next(
        s
        for s in snippets
        if s.kind == "evaluation" and "`self.speculative_num_steps is None`" in s.text
    )
    assert steps_atom.citation == "0.5.11:sglang/srt/server_args.py:3518"


def test_argparse_result_edits_are_checked_by_parsing(kb, stub) -> None:
    log = (
        "$ python -m sglang.launch_server --model-path /moonshotai/Kimi-K2-Thinking --tp 8 "
        "--reasoning_parser kimi_k2\n"
        "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2\n"
    )
    result = Engine(kb).triage(log, release=RELEASE)
    assert result.status == "argparse"
    ctx = context_from_result(kb.store, result)
    help_id = next(s.id for s in build_snippets(result, ctx) if s.kind == "help")
    good = {"set": {"--reasoning-parser": "kimi_k2"}, "remove": ["--reasoning_parser"]}
    stub.push(
        content=_answer(
            f"`--reasoning_parser` is not a flag; the dash spelling is [{help_id}].",
            [good, {"set": {"--tp": 4}, "remove": []}],
            summary="Use dashes.",
        )
    )
    out = assist(result, engine_ctx=ctx, settings=_settings(stub))
    assert out.llm.agrees_with == [1] and out.fixes[0].recommended
    assert _reasons(out) == ["the edited command still fails argparse"]
    assert out.llm.used is True and out.summary == "Use dashes."
