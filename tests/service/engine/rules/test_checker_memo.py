"""The checker's caches (per-card verdicts, the index by dependency, check_fix answers)
give exactly the verdicts of an uncached evaluation, and stay bounded."""

from __future__ import annotations

import pytest

from kb.store import Store
from service.engine.cache import LRUCache, clear_all
from service.engine.expr import trace
from service.engine.rules import card_memo, card_records, checker
from service.engine.rules.checker import (
    cards_for,
    check_fix,
    evaluate_cards,
    facts_for,
    prepare_flags,
)
from tests.service.engine.rules.judging import by_dependencies

SEED = [
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
COMMANDS = [
    SEED,
    SEED[:6],
    [
        "--model-path",
        "/models/m",
        "--attention-backend",
        "trtllm_mha",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-eagle-topk",
        "4",
    ],
    ["--model-path", "/models/m", "--tp", "1", "--page-size", "16"],  # --tp 1 equals the default
    ["--model-path", "/models/m", "--enable-dp-attention", "--dp", "2", "--tp", "4"],
]


def _view(results) -> list[tuple]:
    return [(r.card.id, r.verdict, r.reason, r.unknowns, r.inputs, r.notes) for r in results]


#: fix-candidate-like commands: one flag of a command changed at a time
CANDIDATES = [
    *(SEED[:6] + ["--kv-cache-dtype", dtype] for dtype in ("fp8_e4m3", "fp8_e5m2", "auto")),
    *(SEED[:6] + ["--attention-backend", backend] for backend in ("triton", "fa3")),
    SEED[:6] + ["--page-size", "64"],
]


class _Nothing:
    """A cache that keeps nothing."""

    def get(self, key):
        return None

    def put(self, key, value) -> None:
        pass


@pytest.mark.parametrize("release", ["0.5.11", "0.5.23"])
def test_indexed_evaluation_equals_evaluating_every_card(
    store: Store, release: str, monkeypatch
) -> None:
    """Commands and fix candidates judged one after another (bases, the attributes each
    verdict rested on, records of every kind, slice folds taken over or made again for a
    few changed names) get the verdicts of each command judged alone, card by card."""
    from service.engine.evaluate import fold_slice

    facts = facts_for("rtx-pro-6000-x8", None, "/models/Kimi-K2.6")
    clear_all()
    indexed = {}
    for argv in COMMANDS + CANDIDATES:
        attrs, parsed = prepare_flags(store, release, argv)
        indexed[tuple(argv)] = _view(evaluate_cards(store, release, attrs, facts, parsed))
    # a per-card memo of one entry, no reuse across commands by the attributes read or by
    # the folded values, no folds taken over or made again from the last, and every card
    # passed explicitly: no reuse, no index
    monkeypatch.setattr(card_memo, "_memo", LRUCache("test.card_memo", 1))
    monkeypatch.setattr(card_memo, "attrs_match", lambda *args: False)
    monkeypatch.setattr(card_memo, "view_served", lambda *args: None)
    monkeypatch.setattr(card_memo, "_last_folds", _Nothing())
    monkeypatch.setattr(fold_slice, "_LAST", _Nothing())
    cards = cards_for(store, release)
    for argv in COMMANDS + CANDIDATES:
        clear_all()
        attrs, parsed = prepare_flags(store, release, argv)
        plain = _view(evaluate_cards(store, release, attrs, facts, parsed, cards=list(cards)))
        assert indexed[tuple(argv)] == plain, argv


def test_check_fix_answers_equal_the_uncached_ones(store: Store) -> None:
    facts = facts_for("rtx-pro-6000-x8", None, "/models/Kimi-K2.6")
    clear_all()
    for argv in COMMANDS:
        first = check_fix(store, "0.5.11", argv, facts)
        again = check_fix(store, "0.5.11", argv, facts)
        fresh = checker._check_fix(store, "0.5.11", argv, facts, checker.facts_signature(facts))
        assert first == again == fresh
        assert first[0] is not again[0]  # callers get their own list
    # a mapping of flags is keyed by its items
    assert check_fix(store, "0.5.11", {"--tp": 2}, facts) == checker._check_fix(
        store, "0.5.11", {"--tp": 2}, facts, checker.facts_signature(facts)
    )


def test_check_fix_cache_is_bounded(store: Store, monkeypatch) -> None:
    small: LRUCache = LRUCache("test.check_fix", 3)
    monkeypatch.setattr(checker, "_fix_answers", small)
    for tp in range(1, 9):
        check_fix(store, "0.5.11", ["--model-path", "/models/m", "--tp", str(tp)])
    assert len(small) == 3


def test_a_flag_equal_to_its_default_keeps_its_own_provenance(store: Store) -> None:
    """Verdicts are keyed on provenance too: ``--tp 1`` is explained as the flag, not as
    the default, whichever was evaluated first."""
    clear_all()
    facts = facts_for("rtx-pro-6000-x8", None, "/models/m")
    base_attrs, base_parsed = prepare_flags(store, "0.5.11", ["--model-path", "/models/m"])
    evaluate_cards(store, "0.5.11", base_attrs, facts, base_parsed)
    attrs, parsed = prepare_flags(store, "0.5.11", ["--model-path", "/models/m", "--tp", "1"])
    for r in evaluate_cards(store, "0.5.11", attrs, facts, parsed):
        for name, _, detail in r.inputs:
            if name == "tp_size":
                assert detail == "flag: --tp 1", (r.card.id, detail)


def test_verdicts_reused_across_facts_equal_fresh_ones(store: Store, monkeypatch) -> None:
    """The per-card memo and the shared guard truths are keyed on the facts each evaluation
    read: evaluating under one GPU after another gives what a cold evaluation gives, and
    re-judges only the cards whose reads the new facts answer differently."""
    from service.engine.evaluate import guard_memo

    release = "0.5.23"  # the release whose cards fold the most earlier writes
    machines = [
        ("h100-x8", "/models/Kimi-K2.6"),
        ("h200-x8", "/models/Kimi-K2.6"),  # same generation, more memory
        ("b200-x8", "/models/Qwen3-8B"),  # another generation and model
    ]
    judged: list[int] = []
    real_judge = card_records.judge_card

    def counting_judge(*args):
        judged[-1] += 1
        return real_judge(*args)

    clear_all()  # the shared guard truths too
    assert not guard_memo._SHARED
    warm = []
    monkeypatch.setattr(card_records, "judge_card", counting_judge)
    for hw, model in machines:
        facts = facts_for(hw, None, model)
        judged.append(0)
        warm.append(
            [
                _view(evaluate_cards(store, release, a, facts, p))
                for a, p in _commands(store, release)
            ]
        )
    n_cards = len(cards_for(store, release))
    assert judged[1] < n_cards  # most verdicts under the H100 served the H200
    for (hw, model), got in zip(machines, warm, strict=True):
        for table in (
            card_memo._memo,
            card_memo._by_view,
            card_memo._shared,  # the guard truths
            trace._SHARED,  # the facts' answers
            checker._reference,
            checker._fix_answers,
        ):
            table.clear()  # the verdicts only: the release's parsed plans stay warm
        guard_memo._SHARED.clear()
        facts = facts_for(hw, None, model)
        fresh = [
            _view(evaluate_cards(store, release, a, facts, p)) for a, p in _commands(store, release)
        ]
        assert got == fresh, (hw, model)


def _commands(store: Store, release: str) -> list[tuple]:
    return [prepare_flags(store, release, argv) for argv in COMMANDS]


def test_a_candidate_judges_only_cards_whose_verdict_read_what_it_changes(
    store: Store, monkeypatch
) -> None:
    """Each verdict keeps the attributes it rested on: a fix candidate changing one flag
    sends fewer cards to judging than the dependency index names, with equal verdicts."""
    facts = facts_for("h100-x8", None, "/models/Kimi-K2.6")
    sent = [0]
    real_evaluate = checker.judge_entries

    def counting(store, release, entries, *args, **kwargs):
        sent[0] += len(entries)
        return real_evaluate(store, release, entries, *args, **kwargs)

    def run() -> list[list[tuple]]:
        clear_all()
        out = []
        for argv in [SEED[:6], *CANDIDATES]:
            attrs, parsed = prepare_flags(store, "0.5.23", argv)
            out.append(_view(evaluate_cards(store, "0.5.23", attrs, facts, parsed)))
        return out

    monkeypatch.setattr(checker, "judge_entries", counting)
    kept = run()
    with_deps, sent[0] = sent[0], 0

    by_dependencies(monkeypatch)
    assert run() == kept
    assert 0 < with_deps < sent[0]
