"""Judging a series of commands from cold caches while counting the cards judged: the
rule-card tests compare a memo's verdicts with those of the same series judged without it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from kb.store import Store
from service.engine.cache import clear_all
from service.engine.expr.interpreter import Value
from service.engine.rules import card_records, checker
from service.engine.rules.checker import evaluate_cards, prepare_flags
from tests.service.engine.counting import calls_of

Verdicts = list[list[tuple]]


def judging(
    store: Store,
    release: str,
    facts: Mapping[str, Value],
    commands: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Callable[[], Verdicts], list[int]]:
    """(a run of ``commands`` from cold caches giving each card's verdict, reason, inputs
    and notes per command, the number of cards the last run judged)."""
    judged = calls_of(monkeypatch, card_records, "judge_card")

    def run() -> Verdicts:
        clear_all()
        judged[0] = 0
        out = []
        for argv in commands:
            attrs, parsed = prepare_flags(store, release, argv)
            out.append(
                [
                    (r.card.id, r.verdict, r.reason, r.inputs, r.notes)
                    for r in evaluate_cards(store, release, attrs, facts, parsed)
                ]
            )
        return out

    return run, judged


def by_dependencies(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a command judges every card its changed attributes may reach (the
    dependency index), not only those whose verdict rested on one of them."""
    real = checker._todo

    def todo(plan, base, changed):
        if isinstance(base, dict):
            return real(plan, {i: (r, None) for i, (r, _) in base.items()}, changed)
        return real(plan, [None if b is None else (b[0], None) for b in base], changed)

    monkeypatch.setattr(checker, "_todo", todo)
