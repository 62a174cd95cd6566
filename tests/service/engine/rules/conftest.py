"""Fixtures for the rule-card tests: the cards derived from the session KB."""

from __future__ import annotations

import pytest

from kb.rules.cards import Card
from kb.store import Store


@pytest.fixture(scope="session")
def derived(store: Store) -> list[Card]:
    from service.engine.rules.derive import derive_cards

    return derive_cards(store)
