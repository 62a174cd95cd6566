"""The replay-backed fix search (:mod:`service.replay.fix_search`): re-ranking by replay's
verdicts, and real searches on generated incidents through the sandboxed replay."""

from __future__ import annotations

import pytest

from evals.incidents import load_incidents
from evals.runner import request_for
from service.engine import Engine, FixOut, TriageResult
from service.engine.explain.deterministic import fix_phrase
from service.replay.fix_search import keeping_alternatives, needs_search, rerank, search_fixes
from service.replay.sandbox import status as sandbox_status

needs_sandbox = pytest.mark.skipif(
    not sandbox_status().available, reason="replay needs the OS sandbox (bwrap)"
)


def _fix(rank: int, replay: str | None, recommended: bool = False) -> FixOut:
    return FixOut(
        rank=rank,
        argv=["--model-path", "m", f"--x{rank}"],
        command=f"fix {rank}",
        origin="test",
        fixes_check="true",
        verdict="fixes the check",
        recommended=recommended,
        replay={"status": replay, "detail": replay, "location": "elsewhere"} if replay else None,
    )


def _answer(kb, release: str) -> TriageResult:
    """The engine's answer to the first shipped generated incident of ``release``."""
    inc = next(
        i
        for i in load_incidents()
        if i.expected.release == release and i.id.startswith("gen-") and i.hardware
    )
    body = request_for(inc)
    payload = {k: v for k, v in body.items() if k in ("log", "command", "model")}
    return Engine(kb).triage(
        payload,
        hardware=body.get("hardware"),
        model_arch=body.get("model_arch"),
        model=body.get("model"),
    )


def test_rerank_puts_what_replay_accepted_first_and_recommends_it() -> None:
    class Result:  # only what rerank reads and writes
        fixes = [_fix(1, "next_failure", recommended=True), _fix(2, None), _fix(3, "verified")]
        no_flag_fix = None

    res = Result()
    assert rerank(res, [res.fixes[0], res.fixes[2]], "0.5.x with h100-x8") == "verified"  # type: ignore[arg-type]
    assert [f.command for f in res.fixes] == ["fix 3", "fix 2", "fix 1"]
    assert [f.rank for f in res.fixes] == [1, 2, 3]
    assert [f.recommended for f in res.fixes] == [True, False, False]
    assert "accepted by replay" in res.fixes[0].verdict
    assert "rejected by replay" in res.fixes[2].verdict


def test_rerank_recommends_nothing_when_replay_rejects_every_candidate() -> None:
    class Result:
        fixes = [_fix(1, "next_failure", recommended=True), _fix(2, "next_failure")]
        no_flag_fix = None

    res = Result()
    assert rerank(res, list(res.fixes), "0.5.x with h100-x8") == "rejected"  # type: ignore[arg-type]
    assert not any(f.recommended for f in res.fixes)
    assert "rejected every candidate" in (res.no_flag_fix or "")


def test_rerank_keeps_the_engine_recommendation_when_replay_cannot_decide() -> None:
    class Result:
        fixes = [_fix(1, "unverified", recommended=True), _fix(2, "next_failure")]
        no_flag_fix = None

    res = Result()
    assert rerank(res, list(res.fixes), "0.5.x with h100-x8") == "unverified"  # type: ignore[arg-type]
    assert res.fixes[0].recommended and res.fixes[0].command == "fix 1"


def test_a_clean_static_answer_needs_no_search_and_an_undecided_one_does(kb) -> None:
    answer = _answer(kb, "0.5.11")
    clean = (
        any(f.recommended for f in answer.fixes)
        and answer.evaluation is not None
        and answer.evaluation.fired == "true"
        and all(f.fixes_check != "unknown" for f in answer.fixes)
    )
    assert needs_search(answer) is not clean
    if answer.fixes:
        for f in answer.fixes:
            f.recommended = False
        assert needs_search(answer)
    answer.parsed.command = None
    assert not needs_search(answer)  # nothing to replay without the command


def test_search_without_replay_says_why(kb, kb_settings) -> None:
    answer = _answer(kb, "0.5.11")
    before = [f.model_dump() for f in answer.fixes]
    answer.release.release = "0.0.0"  # no wheel of it in the cache
    answer = search_fixes(answer, kb_settings, deadline_s=5, force=True)
    assert answer.fix_search is not None and answer.fix_search.status == "skipped"
    assert "wheel" in answer.fix_search.detail or "sandbox" in answer.fix_search.detail
    assert [f.model_dump() for f in answer.fixes] == before


@needs_sandbox
@pytest.mark.parametrize("release", ["0.5.23", "0.5.21"])
def test_search_replays_the_candidates_and_recommends_what_sglang_accepts(
    kb, kb_settings, release
) -> None:
    """On the resolution pipeline: every candidate replayed on the incident's hardware gets
    SGLang's verdict, and the recommendation is the first fix replay accepted."""
    answer = _answer(kb, release)
    assert answer.fixes, "the engine offers candidates"
    answer = search_fixes(answer, kb_settings, deadline_s=600, force=True, max_candidates=3)
    fs = answer.fix_search
    assert fs is not None and fs.status in ("verified", "rejected", "unverified"), fs
    assert fs.release == release and fs.hardware == answer.parsed.hardware
    replayed = [f for f in answer.fixes if f.replay is not None]
    assert len(replayed) == min(3, len([f for f in answer.fixes if f.fixes_check != "false"]))
    statuses = [f.replay["status"] for f in replayed]  # type: ignore[index]
    assert set(statuses) <= {"verified", "next_failure", "unverified"}
    if fs.status == "verified":
        top = answer.fixes[0]
        assert top.recommended and top.replay["status"] == "verified"  # type: ignore[index]
        assert sum(f.recommended for f in answer.fixes) == 1
        assert f"replay on {release} with {answer.parsed.hardware}" in top.verdict
        # the summary names the fix replay accepted (it is cut at 29 words)
        assert fix_phrase(top) in answer.summary or len(answer.summary.split()) == 29
    if fs.status == "rejected":
        assert not any(f.recommended for f in answer.fixes)


@needs_sandbox
def test_past_the_deadline_the_answer_returns_and_replay_goes_on(kb, kb_settings) -> None:
    answer = _answer(kb, "0.5.23")
    recommended = [f.command for f in answer.fixes if f.recommended]
    answer = search_fixes(answer, kb_settings, deadline_s=0.0, force=True, max_candidates=1)
    assert answer.fix_search is not None
    # answered from the cache at once, or handed to the background: never a wait
    assert answer.fix_search.status in ("background", "verified", "rejected", "unverified")
    if answer.fix_search.status == "background":
        assert [f.command for f in answer.fixes if f.recommended] == recommended


@needs_sandbox
def test_a_clean_answer_replays_only_its_recommended_fix_first(kb, kb_settings) -> None:
    """Static evaluation sure of its fix: one command line is replayed, and the other
    candidates only when SGLang refuses that fix."""
    answer = _answer(kb, "0.5.11")
    if needs_search(answer):
        pytest.skip("the engine leaves this incident undecided")
    recommended = next(f for f in answer.fixes if f.recommended)
    # with the fixes that keep more of the request, when it gives part of it up
    first = [recommended, *keeping_alternatives(answer, recommended, 4)]
    searched = search_fixes(answer, kb_settings, deadline_s=600)
    # the searched answer is a new one: its fixes are copies, found again by their command
    recommended = next(f for f in searched.fixes if f.command == recommended.command)
    n_first = len(first)
    first = [f for f in searched.fixes if any(f.command == o.command for o in first)]
    answer = searched
    fs = answer.fix_search
    assert fs is not None and recommended.replay is not None
    if recommended.replay["status"] == "verified":
        assert fs.status == "verified" and fs.candidates == n_first
        assert answer.fixes[0].recommended and answer.fixes[0] in first
        assert all(f.replay is None for f in answer.fixes if all(f is not o for o in first))
    elif recommended.replay["status"] == "next_failure":
        assert fs.candidates > 1 and not recommended.recommended
    search_fixes(answer, kb_settings, deadline_s=600, verify_clean=False)  # nothing to do
