"""Fixtures for the rule-card tests: the session KB's structured index and derived cards."""

from __future__ import annotations

import pytest

from kb.rules.cards import Card
from kb.store import Store


@pytest.fixture(scope="session")
def store(kb) -> Store:  # noqa: ANN001 - the session KnowledgeBase fixture
    return kb.store


@pytest.fixture(scope="session")
def derived(store: Store) -> list[Card]:
    from service.engine.rules.derive import derive_cards

    return derive_cards(store)
