"""The checker: verdicts per card, facts, demotion of fixes that trip a neighbour, memoisation."""

from __future__ import annotations

from kb.rules.cards import Card
from kb.store import Store
from service.engine import cache_stats
from service.engine.rules import release_cards
from service.engine.rules.checker import cards_for, check, check_fix, facts_for, prepare_flags

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
TRTLLM = [
    "--model-path",
    "/models/m",
    "--attention-backend",
    "trtllm_mha",
    "--speculative-algorithm",
    "EAGLE",
]


def _by_rule(argv, release: str, store: Store, facts=None) -> dict:
    return {v.rule: v for v in check(argv, release, facts, store=store)}


def _card_citing(derived: list[Card], text: str) -> Card:
    return next(c for c in derived if any(text in x for x in c.citations))


def test_one_verdict_per_applicable_card(store: Store) -> None:
    verdicts = check(SEED, "0.5.11", store=store)
    cards = cards_for(store, "0.5.11")
    assert [v.rule for v in verdicts] == [c.id for c in cards]
    assert {v.verdict for v in verdicts} <= {"violated", "satisfied", "unknown", "not_applicable"}
    assert all(c.applies_to("0.5.11") for c in cards)
    assert not any(c.id == "c-dsv4-nextn-raw-string" for c in cards)  # 0.5.23 only


def test_trtllm_mha_topk_card_fires_only_for_topk_above_one(store: Store) -> None:
    bad = _by_rule(TRTLLM + ["--speculative-eagle-topk", "4"], "0.5.11", store)
    ok = _by_rule(TRTLLM + ["--speculative-eagle-topk", "1"], "0.5.11", store)
    assert bad["c-trtllm-mha-topk1"].verdict == "violated"
    assert bad["c-trtllm-mha-topk1"].severity == "error"
    assert ok["c-trtllm-mha-topk1"].verdict in ("satisfied", "not_applicable")


def test_derived_trtllm_card_uses_earlier_writes(store: Store, derived: list[Card]) -> None:
    card = _card_citing(
        derived,
        "0.5.11:sglang/srt/server_args.py:ServerArgs._handle_speculative_decoding:3535-3537",
    )
    steps = ["--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4"]
    assert (
        _by_rule(TRTLLM + ["--speculative-eagle-topk", "4"] + steps, "0.5.11", store)[
            card.id
        ].verdict
        == "violated"
    )
    assert (
        _by_rule(TRTLLM + ["--speculative-eagle-topk", "1"] + steps, "0.5.11", store)[
            card.id
        ].verdict
        == "satisfied"
    )
    # without --speculative-num-steps SGLang picks topk itself only in a branch that first
    # asserts topk unset: a topk the user set survives that branch, and the card reads it
    v = _by_rule(TRTLLM + ["--speculative-eagle-topk", "4"], "0.5.11", store)[card.id]
    assert v.verdict == "violated" and "speculative_eagle_topk" in v.reason


def test_seed_command_violates_the_bare_assert_card(store: Store, derived: list[Card]) -> None:
    card = _card_citing(derived, "ServerArgs._handle_speculative_decoding:3519-3522")
    v = _by_rule(SEED, "0.5.11", store, facts_for("rtx-pro-6000-x8", None, "/models/Kimi-K2.6"))
    assert v[card.id].verdict == "violated"
    assert "speculative_eagle_topk=4" in v[card.id].reason
    fixed = [
        t
        for t in SEED
        if t not in ("--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")
    ]
    assert _by_rule(fixed, "0.5.11", store)[card.id].verdict == "satisfied"


def test_unknown_names_the_missing_fact(store: Store) -> None:
    argv = ["--model-path", "/models/m", "--attention-backend", "trtllm_mha"]
    v = _by_rule(argv, "0.5.11", store)["c-trtllm-mha-prefill-sm100-0511"]
    assert v.verdict == "unknown" and "is_sm100_supported()" in v.reason
    assert (
        _by_rule(argv, "0.5.11", store, facts_for("b200-x8"))[
            "c-trtllm-mha-prefill-sm100-0511"
        ].verdict
        == "satisfied"
    )
    assert (
        _by_rule(argv, "0.5.11", store, facts_for("h100-x8"))[
            "c-trtllm-mha-prefill-sm100-0511"
        ].verdict
        == "violated"
    )


def test_dict_flags_and_model_facts(store: Store) -> None:
    flags = {
        "--model-path": "/models/DeepSeek-V4-Flash",
        "speculative_algorithm": "NEXTN",
        "--speculative-eagle-topk": 1,
    }
    v = _by_rule(flags, "0.5.23", store, facts_for(model_arch="DeepseekV4ForCausalLM"))
    assert v["c-dsv4-nextn-raw-string"].verdict == "violated"
    flags["speculative_algorithm"] = "EAGLE"
    v = _by_rule(flags, "0.5.23", store, facts_for(model_arch="DeepseekV4ForCausalLM"))
    assert v["c-dsv4-nextn-raw-string"].verdict == "satisfied"
    flags["speculative_algorithm"] = "NEXTN"
    v = _by_rule(flags, "0.5.23", store, facts_for(model_arch="LlamaForCausalLM"))
    assert v["c-dsv4-nextn-raw-string"].verdict == "not_applicable"
    assert _by_rule(flags, "0.5.23", store)["c-dsv4-nextn-raw-string"].verdict == "unknown"


def test_fix_that_trips_a_neighbouring_card_is_violating(store: Store, derived: list[Card]) -> None:
    """Setting --speculative-num-steps satisfies the seed card but still trips the page-size
    card (topk 4 is kept either way: SGLang only picks topk itself in a branch that asserts
    it unset), so the fix is "violating"; without topk and draft tokens nothing is."""
    seed_card = _card_citing(derived, "ServerArgs._handle_speculative_decoding:3519-3522")
    page_card = _card_citing(derived, "ServerArgs._handle_speculative_decoding:3553-3555")
    facts = facts_for("rtx-pro-6000-x8", None, "/models/Kimi-K2.6")
    before = SEED + ["--page-size", "16", "--attention-backend", "triton"]
    after = before + ["--speculative-num-steps", "3"]
    v0, v1 = _by_rule(before, "0.5.11", store, facts), _by_rule(after, "0.5.11", store, facts)
    assert v0[seed_card.id].verdict == "violated" and v0[page_card.id].verdict == "violated"
    assert v1[seed_card.id].verdict != "violated" and v1[page_card.id].verdict == "violated"
    verdicts, bad = check_fix(store, "0.5.11", after, facts)
    assert bad and page_card.id in {v.rule for v in verdicts if v.verdict == "violated"}
    clean = [
        t
        for t in before
        if t not in ("--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")
    ]
    verdicts, bad = check_fix(store, "0.5.11", clean, facts)
    assert not bad, [v for v in verdicts if v.verdict == "violated"]


def test_background_violations_do_not_count(store: Store) -> None:
    # 0.5.23's check_load_publish_args misses its early exit in the index, so its card is
    # violated by --model-path alone; check_fix must not hold that against every command
    _, bad = check_fix(store, "0.5.23", ["--model-path", "/models/m", "--tp", "2"])
    assert not bad


def _memo_stats() -> tuple[int, int, int]:
    """Lookups and misses of the per-card verdict memo, and misses of the release-defaults
    verdicts, so far: each miss is a card (or every card of a release) evaluated."""
    stats = cache_stats()
    cards = stats["rules.card_verdicts"]
    return (
        cards["hits"] + cards["misses"],
        cards["misses"],
        stats["rules.defaults_verdicts"]["misses"],
    )


def _reach(store: Store, release: str, argv: list[str]) -> set[int]:
    """Indexes of the cards ``argv`` can make the checker look at: those depending on an
    attribute it sets, and those looking at the spellings typed."""
    plan = release_cards.release_plan(store, release)
    attrs = prepare_flags(store, release, argv)[1].values
    return set(plan.given).union(*(plan.by_dep.get(a, ()) for a in attrs))


def test_warm_check_reevaluates_only_the_cards_a_change_touches(store: Store) -> None:
    """Under the release's defaults every card is judged once per set of facts; a command
    then looks up only the cards depending on an attribute it sets (and those looking at
    the spellings typed), and evaluates only those whose inputs it has not seen."""
    facts = facts_for("rtx-pro-6000-x8", None, "/models/Kimi-K2.6")
    for release in ("0.5.11", "0.5.23"):
        plan = release_cards.release_plan(store, release)
        check(SEED, release, facts, store=store)  # warm the caches
        looked0, judged0, defaults0 = _memo_stats()
        check(SEED, release, facts, store=store)
        looked1, judged1, defaults1 = _memo_stats()
        assert (judged1, defaults1) == (judged0, defaults0), release  # all from the memo
        assert looked1 - looked0 <= len(_reach(store, release, SEED)), release
        # one more flag: only the cards depending on it (or on the spellings) are judged
        touched = set(plan.by_dep.get("page_size", ())) | set(plan.given)
        assert len(touched) < len(plan.cards) / 4, release
        check(SEED + ["--page-size", "32"], release, facts, store=store)
        looked2, judged2, defaults2 = _memo_stats()
        assert looked2 - looked1 <= len(_reach(store, release, SEED + ["--page-size", "32"])), (
            release
        )
        assert judged2 - judged1 <= len(touched) and defaults2 == defaults1, release
