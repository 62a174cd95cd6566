"""A card's verdict serves another command when the attributes its evaluation read are
answered alike (:mod:`service.engine.rules.attr_reads`)."""

from __future__ import annotations

from kb.store import Store
from service.engine.expr.interpreter import Provenance, Value
from service.engine.rules import card_memo
from service.engine.rules.attr_reads import AttrReads, attrs_match
from service.engine.rules.checker import facts_for
from tests.service.engine.rules.judging import by_dependencies, judging


def _v(value: object, detail: str = "--x") -> Value:
    return Value(value, Provenance("flag", detail))


def test_reads_are_recorded_with_value_provenance_and_absence() -> None:
    base = {"tp_size": _v(2, "--tp 2"), "page_size": _v(16, "--page-size 16")}
    read = AttrReads(base)
    assert read.get("tp_size").value == 2
    assert "dp_size" not in read and read.get("dp_size") is None
    assert not read.whole
    recorded = read.snapshot()
    assert [k for k, _ in recorded] == ["tp_size", "dp_size"]  # page_size was never read
    assert attrs_match(recorded, {**base, "page_size": _v(64)}, {})  # unread: no matter
    assert not attrs_match(recorded, {**base, "tp_size": _v(2, "--tp-size 2")}, {})  # origin
    assert not attrs_match(recorded, {**base, "dp_size": _v(None)}, {})  # present now
    list(read)
    assert read.whole  # iterating depends on every attribute


def test_verdicts_reused_by_reads_equal_fresh_ones_and_judge_fewer_cards(
    store: Store, monkeypatch
) -> None:
    """Fix candidates differing in one flag: each verdict equals a fresh evaluation's,
    and reuse by the attributes read judges fewer cards than the dependency index alone."""
    release = "0.5.23"
    facts = facts_for("h100-x8", None, "/models/Qwen3-8B")
    base = ["--model-path", "/models/Qwen3-8B", "--tp", "2"]
    commands = [base, *(base + ["--page-size", str(p)] for p in (16, 32, 64))]
    run, judged = judging(store, release, facts, commands, monkeypatch)
    # neither the records by the folded values nor the attributes each verdict rested on
    # (which leave alone the cards that read no changed attribute) take part here
    monkeypatch.setattr(card_memo, "view_served", lambda *args: None)
    by_dependencies(monkeypatch)
    reused = run()
    with_reuse = judged[0]
    monkeypatch.setattr(card_memo, "attrs_match", lambda *args: False)
    assert run() == reused
    assert 0 < with_reuse < judged[0]
