"""Derived cards of one release, validated from the file cache one release at a time."""

from __future__ import annotations

from service.engine.rules import derive


def test_cards_for_one_release_are_those_of_all_filtered(store) -> None:
    everything = derive.derive_cards(store)
    for release in ("0.5.5", "0.5.11", "0.5.23"):
        some = derive.derive_cards_for(store, release)
        assert [c.id for c in some] == [c.id for c in everything if c.applies_to(release)]
        assert some and len(some) < len(everything)


def test_a_fresh_process_validates_only_the_asked_release(store, monkeypatch) -> None:
    derive.derive_cards(store)  # the file cache exists and is fresh
    with derive._lock:
        derive._memory.clear()
    validated: list[str] = []
    real = derive._card_of

    def counting(rec: dict) -> object:
        validated.append(rec["card"]["id"])
        return real(rec)

    monkeypatch.setattr(derive, "_card_of", counting)
    cards = derive.derive_cards_for(store, "0.5.11")
    sources = derive.derived_sources(store)
    assert len(validated) == len(cards)  # the sources came without validating any card
    assert all("0.5.11" in sources[c.id] or c.applies_to("0.5.11") for c in cards)
    with derive._lock:
        derive._memory.clear()
