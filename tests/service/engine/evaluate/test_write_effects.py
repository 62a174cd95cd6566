"""A plan folded again from its last fold evaluates only the writes a changed value (or a
fact answered otherwise) reaches, and gives exactly the fold made from scratch."""

from __future__ import annotations

import pytest

from kb.store import Store
from service.engine.cache import clear_all
from service.engine.evaluate import write_effects
from service.engine.evaluate.fold import fold_plan
from service.engine.evaluate.memo_keys import value_signature
from service.engine.evaluate.slice_plan import plan_reads
from service.engine.evaluate.write_effects import fold_effects
from service.engine.expr.overlay import Overlay
from service.engine.expr.trace import FactsTrace
from service.engine.rules.card_memo import differing
from service.engine.rules.checker import facts_for, prepare_flags
from service.engine.rules.release_cards import card_entry, cards_for
from tests.service.engine.counting import calls_of

RELEASE = "0.5.23"
BASE = ["--model-path", "/models/Kimi-K2.6", "--tp", "8", "--speculative-algorithm", "NEXTN"]
CANDIDATES = [
    [*BASE, "--kv-cache-dtype", "fp8_e4m3"],
    [*BASE, "--attention-backend", "triton"],
    [*BASE, "--attention-backend", "flashinfer", "--page-size", "64"],
    [*BASE, "--speculative-algorithm", "EAGLE3"],
]


def _long_plan(store: Store, facts):
    """The check, names and plan of the card with the longest fold plan."""
    best = None
    for card in cards_for(store, RELEASE):
        e = card_entry(store, RELEASE, card)
        if e.row is None:
            continue
        names = frozenset(e.card.reads)
        plan, _ = fold_plan(store, RELEASE, e.row, names, frozenset(facts))
        if best is None or len(plan) > len(best[2]):
            best = (e.row, names, plan)
    assert best is not None and len(best[2]) >= 20
    return best


def _fold(store, check, names, plan, attrs, facts, reads, prior=None):
    trace = FactsTrace(facts)
    trace.provenance = False
    fold, effects = fold_effects(
        RELEASE, check, plan, Overlay(attrs), trace, names, {}, reads, prior
    )
    done, caveats, notes = fold
    shown = (
        [(a, value_signature(v)) for a, v in done],
        list(caveats),
        {k: list(v) for k, v in notes.items()},
        dict(trace.reads),
    )
    return shown, effects


@pytest.mark.parametrize("unknown_every", [0, 5])
def test_a_refold_evaluates_the_writes_reached_and_equals_a_cold_fold(
    store: Store, monkeypatch, unknown_every: int
) -> None:
    """Each candidate differs from the base command in a flag or two: folding from the
    base's effects evaluates fewer writes than the plan holds (writes whose reads are not
    known always among them) and gives the cold fold's assignments, caveats, notes and
    fact reads."""
    facts = facts_for("h200-x8", None, "/models/Kimi-K2.6")
    check, names, plan = _long_plan(store, facts)
    reads = list(plan_reads(plan))
    if unknown_every:  # as for a write whose texts cannot be read
        reads = [None if i % unknown_every == 0 else r for i, r in enumerate(reads)]
    known = tuple(reads)
    # every effect evaluated, none served by the memo of effects
    monkeypatch.setattr(write_effects._EFFECTS, "get", lambda key: None)
    evaluated = calls_of(monkeypatch, write_effects, "_effect_of")
    base, _ = prepare_flags(store, RELEASE, BASE)
    clear_all()
    _, effects = _fold(store, check, names, plan, base, facts, known)
    reached = []
    for argv in CANDIDATES:
        attrs, _ = prepare_flags(store, RELEASE, argv)
        evaluated[0] = 0
        warm, _ = _fold(
            store, check, names, plan, attrs, facts, known, (effects, differing(attrs, base))
        )
        reached.append(evaluated[0])
        assert warm == _fold(store, check, names, plan, attrs, facts, known)[0], argv
    assert max(reached) < len(plan)
    if unknown_every:
        assert min(reached) >= len(range(0, len(plan), unknown_every))


def test_a_refold_under_other_facts_equals_a_cold_fold(store: Store, monkeypatch) -> None:
    """The same command under another GPU: the writes whose facts answer otherwise are
    evaluated again, and the fold is the cold one's."""
    first = facts_for("h200-x8", None, "/models/Kimi-K2.6")
    check, names, plan = _long_plan(store, first)
    reads = plan_reads(plan)
    monkeypatch.setattr(write_effects._EFFECTS, "get", lambda key: None)
    attrs, _ = prepare_flags(store, RELEASE, BASE)
    clear_all()
    _, effects = _fold(store, check, names, plan, attrs, first, reads)
    for hw in ("b200-x8", "mi300x-x8"):
        facts = facts_for(hw, None, "/models/Kimi-K2.6")
        warm, _ = _fold(store, check, names, plan, attrs, facts, reads, (effects, set()))
        assert warm == _fold(store, check, names, plan, attrs, facts, reads)[0], hw
