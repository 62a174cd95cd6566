"""Derived cards: one per qualifying check, deduplicated across releases, cached."""

from __future__ import annotations

import hashlib
import json

import pytest

from kb.code_types import Check
from kb.rules.cards import Card, citation_problem, schema_errors
from kb.store import Store
from service.engine.expr.interpreter import referenced_names
from service.engine.rules.callsites import ARG_OBJECTS
from service.engine.rules.derive import derivation_key, derived_path, version_range
from service.engine.rules.derived_checks import derive_release, qualifying_checks

SEED_CITATION = "0.5.11:sglang/srt/server_args.py:ServerArgs._handle_speculative_decoding:3519-3522"


def _reads_args(row: Check) -> bool:
    texts = [g["condition"] for g in row.guards] + ([row.condition] if row.condition else [])
    names: set[str] = set()
    for t in texts:
        try:
            names |= referenced_names(t, ARG_OBJECTS)
        except Exception:
            continue
    return any(not n.startswith("_") for n in names)


@pytest.mark.parametrize("release", ["0.5.11", "0.5.23"])
def test_derivation_counts_follow_the_release_checks(
    store: Store, derived: list[Card], release: str
) -> None:
    surface = qualifying_checks(store, release)
    reading_args = [r for r in surface if _reads_args(r)]
    raw = derive_release(store, release)
    # every qualifying check that reads an argument becomes a card (a few more read one
    # only once local variables are substituted); nothing outside the surface does
    assert len(raw) <= len(surface)
    assert len(raw) >= 0.9 * len(reading_args)
    assert all(
        d.path == "sglang/srt/server_args.py" or d.path.startswith("sglang/srt/arg_groups/")
        for d in raw
    )
    cards = [c for c in derived if any(x.startswith(f"{release}:") for x in c.citations)]
    assert 0 < len(cards) <= len(raw)  # deduplication reduces, never increases
    assert len({(d.when, d.require) for d in raw}) == len(cards)


def test_deduplication_across_releases(store: Store, derived: list[Card]) -> None:
    per_release = sum(len(derive_release(store, r["version"])) for r in store.releases())
    assert len(derived) < per_release
    multi = [c for c in derived if len({x.split(":", 1)[0] for x in c.citations}) > 1]
    assert multi, "some checks are shared by several releases"
    for c in multi[:50]:
        cited = {x.split(":", 1)[0] for x in c.citations}
        assert all(c.applies_to(r) for r in cited)
        for r in {"0.5.9", "0.5.11", "0.5.23"} - cited:
            assert not c.applies_to(r), (c.id, c.releases, r)
    assert len({c.id for c in derived}) == len(derived)


def test_version_range() -> None:
    rels = ["0.5.9", "0.5.11", "0.5.23"]
    assert version_range(["0.5.11", "0.5.9"], rels) == ">=0.5.9,<=0.5.11"
    assert version_range(["0.5.9", "0.5.23"], rels) == ">=0.5.9,<=0.5.23,!=0.5.11"
    assert version_range(["0.5.23"], rels) == ">=0.5.23,<=0.5.23"


def test_seed_assert_becomes_a_card(derived: list[Card]) -> None:
    card = next(c for c in derived if SEED_CITATION in c.citations)
    assert card.origin == "derived" and card.severity == "error"
    assert card.require == (
        "args.speculative_eagle_topk is None and args.speculative_num_draft_tokens is None"
    )
    assert "args.speculative_num_steps is None" in card.when
    assert "args.speculative_algorithm in ('EAGLE', 'EAGLE3', 'STANDALONE')" in card.when
    assert card.applies_to("0.5.9") and card.applies_to("0.5.11") and not card.applies_to("0.5.23")
    assert (
        card.id == "d-" + hashlib.sha256(f"{card.when}\n{card.require}".encode()).hexdigest()[:10]
    )
    assert "bare AssertionError" in card.message
    assert set(card.fix_hints.remove) == {"speculative_eagle_topk", "speculative_num_draft_tokens"}


def test_raise_becomes_not_innermost_guard(derived: list[Card]) -> None:
    card = next(
        c
        for c in derived
        if c.title.startswith("trtllm_mha backend only supports topk") and c.applies_to("0.5.11")
    )
    assert card.require == "not args.speculative_eagle_topk > 1"
    assert "trtllm_mha" in card.when and "speculative_eagle_topk" not in card.when


def test_cross_file_call_site_guards(derived: list[Card]) -> None:
    # apply_deepseek_v4_defaults is only called by model_hook.py for DeepseekV4ForCausalLM
    card = next(
        c
        for c in derived
        if any("deepseek_v4_hook.py:apply_deepseek_v4_defaults:149-154" in x for x in c.citations)
    )
    assert "model_arch in ['DeepseekV4ForCausalLM']" in card.when
    assert card.require == "args.speculative_algorithm in ('EAGLE', 'DSPARK')"


def test_a_hook_registered_for_architectures_runs_for_those_only(
    store: Store, derived: list[Card]
) -> None:
    """0.5.23's model override hooks are dispatched by ``@_register_for("<arch>")``, not
    called: a card derived from one is guarded by the architectures it is registered for,
    so it cannot fire for another model."""
    from service.engine.rules.callsites import arch_registrations, reach_condition
    from service.engine.rules.checker import check, facts_for

    archs = arch_registrations(store, "0.5.23")
    assert archs["_qwen4_exp_overrides"] == ("Qwen4ExpForConditionalGeneration",)
    assert all("For" in a for v in archs.values() for a in v)
    reach = reach_condition(store, "0.5.23", "_qwen4_exp_overrides")
    assert reach == "model_arch in ('Qwen4ExpForConditionalGeneration',)"
    card = next(
        c for c in derived if any("qwen4_exp.py:_qwen4_exp_overrides:39" in x for x in c.citations)
    )
    assert card.when.startswith(reach)
    argv = ["--model-path", "/models/m", "--enable-unified-memory"]

    def verdict(arch: str) -> str:
        verdicts = check(argv, "0.5.23", facts_for("h100-x8", arch), store=store)
        return next(v.verdict for v in verdicts if v.rule == card.id)

    assert verdict("DeepseekV3ForCausalLM") == "not_applicable"
    assert verdict("Qwen4ExpForConditionalGeneration") == "violated"


def test_a_local_without_one_known_value_is_not_substituted(store: Store) -> None:
    """0.5.23's ``handle_page_major_kv_layout`` assigns ``allowed_full`` in three branches and
    calls ``backends.discard(None)`` before asserting ``backends <= allowed_full``: neither
    local has one expression there, so neither is substituted (the card is undecided rather
    than violated whenever a backend is not resolved yet). ``model_config``, assigned once at
    the top level, still is."""
    from service.engine.rules.callsites import local_map, with_locals

    path = "sglang/srt/arg_groups/kv_cache_hook.py"
    fn = next(
        f
        for f in store.query(
            "SELECT start_line FROM functions WHERE release = ? AND path = ? AND name = ?",
            ("0.5.23", path, "handle_page_major_kv_layout"),
        )
    )
    check = next(
        c
        for c in store.checks("0.5.23", path=path, function="handle_page_major_kv_layout")
        if c.condition == "backends <= allowed_full"
    )
    names = local_map(store, "0.5.23", path, fn["start_line"], check.start_line)
    assert "model_config" in names
    assert "backends" not in names and "allowed_full" not in names
    text = with_locals(store, "0.5.23", path, fn["start_line"], check.start_line, check.condition)
    assert text == "backends <= allowed_full"


def test_derived_cards_are_valid_cards(store: Store, derived: list[Card]) -> None:
    for c in derived[:: max(1, len(derived) // 60)]:
        assert schema_errors(c.model_dump(mode="json", by_alias=True, exclude_defaults=True)) == []
        assert citation_problem(store, c.citations[0]) is None
        assert c.reads
        assert "self." not in c.when + c.require and "cfg." not in c.when + c.require


def test_cache_file(store: Store) -> None:
    from service.engine.rules.derive import derive_cards

    for attempt in range(3):  # another test may add/remove a release of the shared KB meanwhile
        cards = derive_cards(store, use_cache=attempt == 0)
        header = json.loads(derived_path(store).read_text().splitlines()[0])["_meta"]
        if header["key"] == derivation_key(store)[0]:
            break
    assert header["key"] == derivation_key(store)[0]
    assert header["cards"] == len(cards)
