"""Keep what the user asked for (issue #28, item 5): among the fixes replay accepts, the
recommended one keeps every flag the user set (then the fewest edits), and a static
recommendation that gives part of the request up is replayed together with the listed
fixes that keep more."""

from __future__ import annotations

from service.engine import FixOut
from service.replay.fix_search import keeping_alternatives, request_cost, rerank


def _fix(
    rank: int,
    edits: list[str],
    replay: str | None = None,
    keeps: bool = True,
    static: str = "true",
    recommended: bool = False,
) -> FixOut:
    removed = [e[2:].split()[0] for e in edits if e.startswith("- ")]
    added = {e[2:].split()[0]: " ".join(e[2:].split()[1:]) for e in edits if e.startswith("+ ")}
    return FixOut(
        rank=rank,
        argv=["--model-path", "m"],
        command=f"fix {rank}",
        origin="test",
        fixes_check=static,
        verdict="fixes the check",
        recommended=recommended,
        edits=edits,
        remove=[r for r in removed if r not in added],
        set=added,
        keeps_features=keeps,
        gives_up="" if keeps else "gives up something",
        replay={"status": replay, "detail": replay} if replay else None,
    )


class _Result:  # only what rerank reads and writes
    def __init__(self, fixes: list[FixOut]) -> None:
        self.fixes = fixes
        self.no_flag_fix = None


def test_request_cost_orders_features_then_the_users_flags_then_edits() -> None:
    drop_feature = _fix(1, ["- --speculative-algorithm EAGLE"], keeps=False)
    change_mine = _fix(2, ["- --tp 8", "+ --tp 4"])
    add_one = _fix(3, ["+ --speculative-num-steps 3"])
    add_two = _fix(4, ["+ --speculative-num-steps 3", "+ --speculative-eagle-topk 1"])
    costs = [request_cost(f) for f in (drop_feature, change_mine, add_one, add_two)]
    assert sorted(costs) == [costs[2], costs[3], costs[1], costs[0]]


def test_replay_accepted_fix_keeping_every_flag_is_recommended() -> None:
    """The engine ranked dropping a feature first; replay accepts it and a fix that keeps
    every flag: the latter is recommended and listed first, the former stays listed."""
    res = _Result(
        [
            _fix(1, ["- --enable-lora"], "verified", keeps=False, recommended=True),
            _fix(2, ["- --max-loras-per-batch 4", "+ --max-loras-per-batch 1"], "verified"),
            _fix(3, ["+ --lora-backend triton"], "verified"),
            _fix(4, ["+ --x 1"], "next_failure"),
        ]
    )
    replayed = list(res.fixes)
    assert rerank(res, replayed, "0.5.x with h100-x8") == "verified"  # type: ignore[arg-type]
    assert [f.command for f in res.fixes] == ["fix 3", "fix 2", "fix 1", "fix 4"]
    assert [f.recommended for f in res.fixes] == [True, False, False, False]
    assert all("accepted by replay" in f.verdict for f in res.fixes[:3])


def test_among_fixes_keeping_the_request_fewest_edits_then_the_engines_order() -> None:
    res = _Result(
        [
            _fix(1, ["+ --a 1", "+ --b 2"], "verified", recommended=True),
            _fix(2, ["+ --c 1"], "verified"),
            _fix(3, ["+ --d 1"], "verified"),
        ]
    )
    rerank(res, list(res.fixes), "0.5.x with h100-x8")  # type: ignore[arg-type]
    assert [f.command for f in res.fixes] == ["fix 2", "fix 3", "fix 1"]
    assert res.fixes[0].recommended


def test_a_fix_replay_rejected_or_did_not_run_is_never_preferred_for_keeping_more() -> None:
    res = _Result(
        [
            _fix(1, ["- --enable-lora"], "verified", keeps=False, recommended=True),
            _fix(2, ["+ --lora-backend triton"], "next_failure"),
            _fix(3, ["+ --max-loras-per-batch 1"], None),
        ]
    )
    rerank(res, res.fixes[:2], "0.5.x with h100-x8")  # type: ignore[arg-type]
    assert res.fixes[0].command == "fix 1" and res.fixes[0].recommended
    assert [f.command for f in res.fixes] == ["fix 1", "fix 3", "fix 2"]


def test_fixes_keeping_more_are_replayed_with_a_recommendation_giving_something_up() -> None:
    top = _fix(1, ["- --enable-lora"], keeps=False, recommended=True)
    fixes = [
        top,
        _fix(2, ["- --enable-lora", "- --lora-paths a"], keeps=False),
        _fix(3, ["+ --lora-backend triton"], static="unknown"),
        _fix(4, ["+ --max-loras-per-batch 1"], static="false"),
        _fix(5, ["- --tp 8", "+ --tp 4"]),
    ]
    res = _Result(fixes)
    alts = keeping_alternatives(res, top, limit=4)  # type: ignore[arg-type]
    # cheaper than the top, and not refuted statically; best first as listed
    assert [f.command for f in alts] == ["fix 3", "fix 5"]
    assert keeping_alternatives(res, top, limit=1) == [fixes[2]]  # type: ignore[arg-type]
    # a recommendation keeping every flag needs no alternative
    assert keeping_alternatives(res, fixes[2], limit=4) == []  # type: ignore[arg-type]


def test_a_guard_flip_replay_rejects_is_dropped_and_one_it_accepts_stays() -> None:
    """A guard flip (it skips the check, its origin says so) is kept only when replay
    accepts it; the engine's mark and the search's agree."""
    from service.engine.fixes.filters import SKIP_NOTE
    from service.replay.fix_search import SKIPS_THE_CHECK, skips_check

    assert f"({SKIP_NOTE})" == SKIPS_THE_CHECK
    flip = _fix(1, ["- --enable-dp-attention"], "next_failure", keeps=False, recommended=True)
    flip.origin = f"drop flags the check reads {SKIPS_THE_CHECK}"
    kept = _fix(2, ["- --dp 3", "+ --dp 2"], "verified")
    res = _Result([flip, kept])
    assert skips_check(flip) and not skips_check(kept)
    assert rerank(res, list(res.fixes), "0.5.x with h100-x8") == "verified"  # type: ignore[arg-type]
    assert res.fixes == [kept] and kept.recommended
    accepted = _fix(1, ["- --enable-dp-attention"], "verified", keeps=False, recommended=True)
    accepted.origin = flip.origin
    res = _Result([accepted])
    rerank(res, list(res.fixes), "0.5.x with h100-x8")  # type: ignore[arg-type]
    assert res.fixes == [accepted] and accepted.recommended


def test_checks_predicted_to_fire_after_a_fix_replay_accepted_are_refuted() -> None:
    fix = _fix(1, ["+ --enable-dp-attention"], "verified")
    fix.trips = [{"id": 7, "path": "sglang/srt/server_args.py", "function": "f", "line": 9}]
    fix.verdict = "fixes this check, but then f at 0.5.x:sglang/srt/server_args.py:9 would fire"
    res = _Result([fix])
    rerank(res, [fix], "0.5.x with h100-x8")  # type: ignore[arg-type]
    assert fix.trips == [] and fix.recommended
    assert fix.replay is not None
    assert fix.replay["refuted_trips"] == ["f (sglang/srt/server_args.py:9)"]
    assert "replay shows that f (sglang/srt/server_args.py:9) does not fire" in fix.verdict
    rejected = _fix(2, ["+ --x 1"], "next_failure")
    rejected.trips = [{"id": 8, "path": "p", "function": "g", "line": 1}]
    res = _Result([rejected])
    rerank(res, [rejected], "0.5.x with h100-x8")  # type: ignore[arg-type]
    assert rejected.trips and "refuted_trips" not in (rejected.replay or {})


def test_a_fix_violating_an_error_card_is_not_recommended_over_one_that_does_not() -> None:
    """The engine's rule (a fix violating an error rule card is never recommended before
    one that does not) holds among what replay accepts too."""
    from service.engine import RuleVerdict

    carded = _fix(1, ["+ --mamba-backend flashinfer"], "verified")
    carded.rule_verdicts = [
        RuleVerdict(rule="d-x", verdict="violated", severity="error", reason="r")
    ]
    clean = _fix(
        2, ["- --enable-mamba-cache-stochastic-rounding"], "verified", keeps=False, recommended=True
    )
    res = _Result([clean, carded])
    rerank(res, list(res.fixes), "0.5.x with h100-x8")  # type: ignore[arg-type]
    assert res.fixes[0] is clean and clean.recommended and not carded.recommended
    # a keeping alternative that violates a card is not worth replaying for a clean top
    assert keeping_alternatives(_Result([clean, carded]), clean, 4) == []  # type: ignore[arg-type]
    # a background violation (``--model-path`` alone violates it) does not count
    carded.rule_verdicts[0].background = True
    assert request_cost(carded) < request_cost(clean)
