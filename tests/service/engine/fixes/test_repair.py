"""Repairing a fix that trips a rule card, on a real release (0.5.23's PD hook)."""

from __future__ import annotations

import pytest

from evals.render import render_log
from service.engine.fixes.propose import Edit
from service.engine.fixes.repair import _extended
from service.engine.rules.lint import _constants
from service.engine.triage import Engine

#: HiSparse with a decode host-receive threshold: 0.5.23's handle_pd_disaggregation refuses
#: the pair, and every single edit of those two flags leads into another refusal.
ARGV = [
    "--model-path",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--tp",
    "1",
    "--disaggregation-decode-host-receive-threshold",
    "0.5",
    "--enable-hisparse",
]


@pytest.fixture(scope="module")
def result(kb):
    check = next(
        c
        for c in kb.store.checks("0.5.23", function="handle_pd_disaggregation")
        if "HiSparse" in (c.message or "") and c.kind == "raise"
    )
    log = render_log(kb.store, "0.5.23", check, python="3.11", argv=ARGV)
    return Engine(kb).triage(log, release="0.5.23", hardware="b200-x8")


def test_every_single_edit_trips_a_card_and_the_repaired_fix_is_clean(result) -> None:
    assert result.status == "located"
    clean = [f for f in result.fixes if f.recommended]
    assert len(clean) == 1 and clean[0].rank == 1
    top = clean[0]
    assert top.fixes_check == "true" and not top.trips
    assert not any(v.verdict == "violated" and v.severity == "error" for v in top.rule_verdicts)
    # it keeps what the user asked for (HiSparse) and adds what HiSparse requires
    assert "--enable-hisparse" in top.argv and "--disable-radix-cache" in top.argv
    assert "--disaggregation-decode-host-receive-threshold" in top.remove
    assert "then a value the card accepts" in top.origin
    # the fix it extends comes next, naming the card it violates on its own; so do the rest
    base = result.fixes[1]
    assert base.remove == top.remove and not base.set and "violates rule" in base.verdict
    others = [f for f in result.fixes if not f.recommended]
    # the rest name the card they violate, once each, or are other clean repairs
    for f in others:
        repaired = "then a value the card accepts" in f.origin
        assert f.verdict.count("violates rule") == (0 if repaired else 1), f
    assert [f.rank for f in result.fixes] == list(range(1, len(result.fixes) + 1))


def test_extension_that_undoes_the_fix_is_refused() -> None:
    base = Edit(remove=["a"], origin="drop")
    assert _extended(base, {"a": 1}, [], "x") is None  # sets what the fix removes
    assert _extended(Edit(set={"a": 1}), {}, ["a"], "x") is None  # removes what it sets
    assert _extended(Edit(set={"a": 1}), {"a": 2}, [], "x") is None  # sets it otherwise
    assert _extended(base, {}, ["a"], "x") is None  # adds nothing
    merged = _extended(base, {"b": True}, ["c"], "note")
    assert merged is not None and merged.set == {"b": True} and merged.remove == ["a", "c"]
    assert merged.origin == "drop, then note"


def test_a_bare_requirement_asks_for_a_true_value() -> None:
    assert _constants("args.disable_radix_cache") == [("disable_radix_cache", True)]
    assert _constants("not args.enable_x") == [("enable_x", False)]
    assert ("page_size", 1) in _constants("args.page_size == 1 or args.disable_x")
