"""A slice of the fold gives each attribute exactly the value the whole fold gives it, reads
fewer facts, and is reused under facts that answer its own questions alike."""

from __future__ import annotations

import pytest

from kb.store import Store
from service.engine.cache import clear_all
from service.engine.evaluate import fold_slice, write_effects
from service.engine.evaluate.fold import fold_earlier_writes
from service.engine.evaluate.fold_slice import FoldedView
from service.engine.evaluate.memo_keys import value_signature
from service.engine.evaluate.slice_plan import plan_slice
from service.engine.expr.trace import FactsTrace
from service.engine.rules.checker import facts_for, prepare_flags
from service.engine.rules.release_cards import card_entry, cards_for
from tests.service.engine.counting import calls_of

COMMANDS = [
    ["--model-path", "/models/Kimi-K2.6", "--tp", "8", "--speculative-algorithm", "NEXTN"],
    ["--model-path", "/models/Qwen3-8B", "--attention-backend", "triton", "--page-size", "16"],
    ["--model-path", "/models/m", "--enable-dp-attention", "--dp", "2", "--tp", "4"],
]


def _derived(store: Store, release: str, limit: int):
    """Up to ``limit`` cards of ``release`` with earlier writes to fold, those reading the
    most attributes first."""
    entries = [card_entry(store, release, c) for c in cards_for(store, release)]
    entries = [e for e in entries if e.row is not None]
    entries.sort(key=lambda e: (-len(e.card.reads), e.card.id))
    return entries[:limit]


@pytest.mark.parametrize("release", ["0.5.11", "0.5.23"])
def test_each_attribute_folds_to_what_the_whole_fold_gives(store: Store, release: str) -> None:
    facts = facts_for("b200-x8", None, "/models/Kimi-K2.6")
    clear_all()
    compared = 0
    for argv in COMMANDS:
        attrs, _ = prepare_flags(store, release, argv)
        for e in _derived(store, release, 60):
            assigned, _, _ = fold_earlier_writes(store, release, e.row, attrs, facts, e.card.reads)
            whole = dict(attrs)
            whole.update(assigned)  # the last assignment wins
            view = FoldedView(store, release, e.row, e.card.reads, attrs, FactsTrace(facts))
            for attr in sorted(e.card.reads):
                assert value_signature(view.get(attr)) == value_signature(whole.get(attr)), (
                    e.card.id,
                    attr,
                )
                assert (attr in view) == (attr in whole)
                compared += 1
    assert compared > 300


def test_a_slice_is_closed_over_what_its_writes_read(store: Store) -> None:
    """Every write of the plan that assigns a name the slice reads is in the slice."""
    from service.engine.evaluate.fold import fold_plan

    facts = facts_for("h100-x8", None, "/models/m")
    checked = 0
    for e in _derived(store, "0.5.23", 40):
        plan, _ = fold_plan(store, "0.5.23", e.row, frozenset(e.card.reads), frozenset(facts))
        for attr in e.card.reads:
            piece = plan_slice(e.row, plan, attr)
            inside = {id(p) for p in piece.writes}
            assert plan_slice(e.row, plan, attr) is piece  # cached per plan
            for p in plan:
                if p[0].attr in piece.reads:
                    assert id(p) in inside, (e.card.id, attr, p[0].citation)
                    checked += 1
            assert [p for p in plan if id(p) in inside] == list(piece.writes)  # plan order
    assert checked > 0


def _fold_all(store: Store, entries, attrs, facts) -> tuple[list[object], int]:
    """Every card attribute's folded value (signature) under ``facts``, and the number of
    fact questions asked."""
    values: list[object] = []
    asked = 0
    for e in entries:
        trace = FactsTrace(facts)
        view = FoldedView(store, "0.5.23", e.row, e.card.reads, attrs, trace)
        values += [value_signature(view.get(attr)) for attr in sorted(e.card.reads)]
        asked += len(trace.reads)
    return values, asked


def test_a_folded_attribute_is_reused_across_facts_it_never_asked_about(
    store: Store, monkeypatch
) -> None:
    """A slice's fold is memoised on the facts it read: under a second GPU of the same
    generation most slices are reused, and the values equal a cold fold's."""
    attrs, _ = prepare_flags(store, "0.5.23", COMMANDS[0])
    entries = _derived(store, "0.5.23", 40)
    folds = calls_of(monkeypatch, fold_slice, "fold_effects")
    first = facts_for("h100-x8", None, "/models/Kimi-K2.6")
    second = facts_for("h200-x8", None, "/models/Kimi-K2.6")  # same generation, more memory
    clear_all()
    _fold_all(store, entries, attrs, first)
    cold_first, folds[0] = folds[0], 0
    reused, asked = _fold_all(store, entries, attrs, second)
    recomputed, folds[0] = folds[0], 0
    clear_all()
    assert _fold_all(store, entries, attrs, second)[0] == reused
    assert cold_first > 0 and folds[0] > recomputed  # a cold run recomputes every slice
    assert asked > 0  # reused or not, the facts a fold rested on reach the caller's trace


def _seen(store: Store, entries, attrs, facts) -> list[object]:
    """Every card attribute's folded value (signature), and the caveats of each card."""
    out: list[object] = []
    for e in entries:
        view = FoldedView(store, "0.5.23", e.row, e.card.reads, attrs, FactsTrace(facts))
        out += [value_signature(view.get(attr)) for attr in sorted(e.card.reads)]
        out.append(tuple(view.caveats))
    return out


def test_a_fold_for_a_candidate_evaluates_only_the_writes_its_change_reaches(
    store: Store, monkeypatch
) -> None:
    """Fix candidates differ from the command in one flag: each slice's fold repeats the
    writes that flag cannot reach from the last fold, and every value and caveat equals a
    cold fold's."""
    base = ["--model-path", "/models/Kimi-K2.6", "--tp", "8", "--speculative-algorithm", "NEXTN"]
    candidates = [
        [*base, "--kv-cache-dtype", dtype] for dtype in ("fp8_e4m3", "fp8_e5m2", "bf16", "auto")
    ] + [[*base, "--attention-backend", "triton"], [*base, "--page-size", "64"]]
    facts = facts_for("h200-x8", None, "/models/Kimi-K2.6")
    entries = _derived(store, "0.5.23", 60)
    evaluated = calls_of(monkeypatch, write_effects, "_effect_of")

    def seen(argv: list[str]) -> list[object]:
        return _seen(store, entries, prepare_flags(store, "0.5.23", argv)[0], facts)

    clear_all()
    seen(base)
    evaluated[0] = 0
    warm = [seen(argv) for argv in candidates]
    incremental = evaluated[0]
    cold = []
    evaluated[0] = 0
    for argv in candidates:
        clear_all()
        cold.append(seen(argv))
    assert warm == cold
    assert 0 < incremental < evaluated[0] / 2


def test_a_fold_under_other_facts_repeats_the_writes_whose_facts_answer_alike(
    store: Store, monkeypatch
) -> None:
    """Each write's effect keeps the facts it read: under another GPU, a slice's fold
    evaluates again only the writes those facts answer otherwise (or that a changed value
    reaches), and every value and caveat equals a cold fold's."""
    argv = ["--model-path", "/models/Kimi-K2.6", "--tp", "8", "--speculative-algorithm", "NEXTN"]
    attrs, _ = prepare_flags(store, "0.5.23", argv)
    entries = _derived(store, "0.5.23", 60)
    evaluated = calls_of(monkeypatch, write_effects, "_effect_of")
    # the last fold's effects alone: no effect kept by the values it read
    monkeypatch.setattr(write_effects._EFFECTS, "get", lambda key: None)
    gpus = [facts_for(hw, None, "/models/Kimi-K2.6") for hw in ("h100-x8", "b200-x8", "mi300x-x8")]

    def warm() -> tuple[list[list[object]], int]:
        clear_all()
        _seen(store, entries, attrs, gpus[0])
        evaluated[0] = 0
        got = [_seen(store, entries, attrs, facts) for facts in gpus[1:]]
        return got, evaluated[0]

    repeated, again = warm()
    cold = []
    for facts in gpus[1:]:
        clear_all()
        cold.append(_seen(store, entries, attrs, facts))
    assert repeated == cold
    # without the last folds' effects every write of a slice not memoised is evaluated
    monkeypatch.setattr(fold_slice._LAST, "get", lambda key: None)
    assert warm()[0] == cold
    assert 0 < again < evaluated[0]


def test_a_write_in_the_slices_of_many_checks_is_evaluated_once_per_values(
    store: Store, monkeypatch
) -> None:
    """A write's effect is kept by the values of the names it reads and the facts it asked:
    the slices of many checks' plans share it, and every value and caveat equals a fold
    without that table."""
    attrs, _ = prepare_flags(store, "0.5.23", COMMANDS[0])
    facts = facts_for("h200-x8", None, "/models/Kimi-K2.6")
    entries = _derived(store, "0.5.23", 60)
    evaluated = calls_of(monkeypatch, write_effects, "_effect_of")
    clear_all()
    shared = _seen(store, entries, attrs, facts)
    once, evaluated[0] = evaluated[0], 0
    clear_all()
    monkeypatch.setattr(write_effects._EFFECTS, "get", lambda key: None)
    assert _seen(store, entries, attrs, facts) == shared
    assert 0 < once < evaluated[0]


def test_an_attribute_seen_through_its_slice_is_what_the_folded_view_reads(
    store: Store,
) -> None:
    """Each attribute seen alone through the fold of its slice (and each one that fold
    decides besides) has the value and caveats a folded view gives on its first read, and
    names a slice that decides it."""
    from service.engine.evaluate.fold import fold_plan
    from service.engine.evaluate.fold_slice import seen_through

    facts = facts_for("b200-x8", None, "/models/Kimi-K2.6")
    compared = 0
    for argv in COMMANDS:
        attrs, _ = prepare_flags(store, "0.5.23", argv)
        clear_all()
        for e in _derived(store, "0.5.23", 40):
            names = frozenset(e.card.reads)
            plan = fold_plan(store, "0.5.23", e.row, names, frozenset(facts))[0]
            seen: dict = {}
            for attr in sorted(names):
                view = FoldedView(store, "0.5.23", e.row, names, attrs, FactsTrace(facts))
                value = view.get(attr)
                got = seen.get(attr) or seen_through(
                    store, "0.5.23", e.row, names, plan, attr, attrs, FactsTrace(facts), into=seen
                )
                assert value_signature(got[0]) == value_signature(value), (e.card.id, attr)
                assert got[1] == view.notes_of.get(attr, ()), (e.card.id, attr)
                assert got[2] is None or attr in got[2].decides
                compared += 1
    assert compared > 200


def test_the_table_of_what_folds_decide_is_emptied_with_the_caches(store: Store) -> None:
    """Emptying the engine's caches lets go of the folds the decided table holds (each
    entry keeps its slice and fold alive)."""
    from service.engine.evaluate.fold import fold_plan
    from service.engine.evaluate.fold_slice import seen_through

    facts = facts_for("b200-x8", None, "/models/Kimi-K2.6")
    attrs, _ = prepare_flags(store, "0.5.23", COMMANDS[0])
    for e in _derived(store, "0.5.23", 5):
        names = frozenset(e.card.reads)
        plan = fold_plan(store, "0.5.23", e.row, names, frozenset(facts))[0]
        for attr in sorted(names):
            seen_through(store, "0.5.23", e.row, names, plan, attr, attrs, FactsTrace(facts))
    assert fold_slice._DECIDED
    clear_all()
    assert not fold_slice._DECIDED
