"""The rule cards rank a located answer's fixes; with ``keep`` they judge only what settles
the places listed, and the places come out as when every fix is judged."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kb.store import Store
from service.engine.answer import FixOut
from service.engine.cache import facts_signature
from service.engine.rules import checker
from service.engine.rules.checker import facts_for
from service.engine.triage.fix_list import rule_verdicts
from tests.service.engine.rules.test_checker import SEED

RELEASE = "0.5.11"
BASE = SEED[:8]  # the seed case's command without --speculative-eagle-topk and draft tokens
#: with these, 0.5.11's page-size card is violated (topk 4 on page size 16, see test_checker)
VIOLATING = [
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
    "--page-size",
    "16",
    "--attention-backend",
    "triton",
    "--speculative-num-steps",
    "3",
]


def _fixes() -> list[FixOut]:
    """Statically verified and undecided fixes, clean and violating, in rank order."""
    shapes = [
        ("true", VIOLATING),
        ("unknown", ["--mem-fraction-static", "0.8"]),
        ("true", ["--page-size", "16", "--attention-backend", "triton"]),
        ("true", [*VIOLATING, "--random-seed", "1"]),
        ("true", ["--page-size", "32"]),
        ("unknown", VIOLATING),
        ("true", ["--chunked-prefill-size", "4096"]),
        ("true", ["--max-running-requests", "64"]),
    ]
    return [
        FixOut(
            rank=i,
            argv=[*BASE, *extra],
            command=" ".join([*BASE, *extra]),
            origin="test",
            fixes_check=check,
            verdict="fixes the check",
        )
        for i, (check, extra) in enumerate(shapes, start=1)
    ]


@pytest.fixture
def ctx(store: Store) -> SimpleNamespace:
    facts = facts_for("rtx-pro-6000-x8", None, "/models/Kimi-K2.6")
    return SimpleNamespace(
        store=store, release=RELEASE, facts=facts, facts_key=facts_signature(facts)
    )


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = checker.check_fix

    def counted(store, release, argv, facts=None, *, facts_sig=None):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return real(store, release, argv, facts, facts_sig=facts_sig)

    monkeypatch.setattr(checker, "check_fix", counted)
    return calls


@pytest.mark.parametrize("keep", [1, 2, 3, 5])
def test_keep_lists_what_judging_every_fix_lists(
    ctx: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, keep: int
) -> None:
    calls = _counting(monkeypatch)
    every = _fixes()
    rule_verdicts(ctx, every)  # type: ignore[arg-type]
    assert len(calls) == len(every)
    calls.clear()
    some = _fixes()
    judged = rule_verdicts(ctx, some, keep=keep)  # type: ignore[arg-type]

    def shown(fixes: list[FixOut]) -> list[tuple[object, ...]]:
        return [
            (f.command, f.fixes_check, f.rank, f.recommended, f.verdict, f.rule_verdicts)
            for f in fixes[:keep]
        ]

    assert shown(some) == shown(every)
    assert len(calls) == len(judged) < len(every)
    assert all(id(f) in judged for f in some[:keep])
    # a fix not judged has no verdicts and sorts after every judged one
    unjudged = [f for f in some if id(f) not in judged]
    assert all(not f.rule_verdicts and some.index(f) >= len(judged) for f in unjudged)


def test_a_violating_fix_ranks_after_the_clean_ones(ctx: SimpleNamespace) -> None:
    fixes = _fixes()
    bad = rule_verdicts(ctx, fixes, keep=3)  # type: ignore[arg-type]
    first = fixes[0]
    assert bad[id(first)] is False and first.recommended
    assert "violates" in next(f for f in _judged_all(ctx) if f.rank > 4).verdict


def _judged_all(ctx: SimpleNamespace) -> list[FixOut]:
    fixes = _fixes()
    rule_verdicts(ctx, fixes)  # type: ignore[arg-type]
    return fixes


def test_a_later_call_judges_only_the_new_fixes(
    ctx: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixes = _fixes()
    judged = rule_verdicts(ctx, fixes, keep=2)  # type: ignore[arg-type]
    kept = fixes[:2]
    calls = _counting(monkeypatch)
    added = _fixes()[4:6]
    rule_verdicts(ctx, kept + added, judged)  # type: ignore[arg-type]
    assert calls == [f.argv for f in added]
