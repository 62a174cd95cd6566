"""The rule cards of a release and what each one's verdict depends on.

:func:`cards_for` gives the curated and derived cards whose range contains a release.
:func:`release_plan` indexes them by their dependencies (:class:`ReleasePlan`): the
attributes each card reads, those its helpers read and, for a derived card, those read by
the guards and values of the writes that run before its check; the checker
(:mod:`service.engine.rules.checker`) re-evaluates only the cards depending on an attribute
a command changes. Everything here is cached per release (:mod:`service.engine.cache`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kb.code_types import Check
from kb.rules.cards import Card, helper_reads, load_curated
from kb.store import Store
from service.engine.cache import cached, recent, release_key
from service.engine.rules.derive import derivation_key, derive_cards_for, derived_sources
from service.engine.rules.derived_checks import qualifying_checks

__all__ = [
    "CardEntry",
    "ReleasePlan",
    "card_entry",
    "cards_for",
    "current_derivation_key",
    "release_plan",
]

_lock = threading.Lock()
_releases_cache: dict[tuple[Any, ...], list[Card]] = {}


def current_derivation_key(store: Store) -> str:
    """:func:`derivation_key` of ``store``, re-read at most every few seconds (as
    :func:`~service.engine.cache.release_key` re-reads content hashes)."""
    return recent(("derivation-key", str(store.path)), lambda: derivation_key(store)[0])


def cards_for(store: Store, release: str) -> list[Card]:
    """Curated and derived cards whose range contains ``release`` (cached)."""
    curated = load_curated()
    key = (
        str(store.path),
        current_derivation_key(store),
        release,
        id(curated[0]) if curated else 0,
        len(curated),
    )
    with _lock:
        hit = _releases_cache.get(key)
    if hit is not None:
        return hit
    cards = [*(c for c in curated if c.applies_to(release)), *derive_cards_for(store, release)]
    with _lock:
        if len(_releases_cache) > 64:
            _releases_cache.clear()
        _releases_cache[key] = cards
    return cards


def _check_rows(store: Store, release: str) -> dict[tuple[str, int], Check]:
    return cached(
        release_key(store, release, "rules:check_rows"),
        lambda: {(r.path, r.start_line): r for r in qualifying_checks(store, release)},
    )


def _release_meta(store: Store, release: str) -> dict[str, tuple[Card, Any, tuple[str, ...]]]:
    """card id -> (card, source check row or None, dependencies): filled lazily, per release."""
    return cached(release_key(store, release, "rules:meta"), dict)


def _meta(store: Store, release: str, card: Card) -> tuple[Check | None, tuple[str, ...]]:
    """(the check a derived card comes from in ``release`` if writes matter, dependencies).

    Dependencies are the attributes the card reads, those its helpers read and,
    for a derived card, those read by the guards and values of the writes that
    run before its check (recorded at derivation time).
    """
    if card.origin == "derived":
        info = derived_sources(store).get(card.id, {}).get(release)
        if info is not None:
            row = _check_rows(store, release).get((info.path, info.start)) if info.writes else None
            return row, info.deps
    return None, tuple(sorted(card.reads | helper_reads(card.when, card.require)))


@dataclass(frozen=True)
class CardEntry:
    """What evaluating one card in one release needs besides the inputs."""

    card: Card
    row: Check | None  # the check whose earlier writes are folded in, if any
    deps: tuple[str, ...]
    uses_given: bool


@dataclass(frozen=True)
class ReleasePlan:
    """The cards of a release, indexed by the attributes their verdicts depend on."""

    key: tuple[Any, ...]
    cards: list[Card]
    entries: list[CardEntry]
    by_dep: dict[str, tuple[int, ...]]  # attribute -> indexes of the cards depending on it
    given: tuple[int, ...]  # indexes of the cards that look at flag spellings


def card_entry(store: Store, release: str, card: Card) -> CardEntry:
    meta = _release_meta(store, release)
    got = meta.get(card.id)
    if got is None or got[0] is not card:
        got = meta[card.id] = (card, *_meta(store, release, card))
    return CardEntry(card, got[1], got[2], card.uses_given)


def release_plan(store: Store, release: str) -> ReleasePlan:
    """Every card of ``release`` with its dependencies, and the index by dependency (cached)."""
    cards = cards_for(store, release)
    key = (*release_key(store, release, "rules:plan"), id(cards), len(cards))

    def build() -> ReleasePlan:
        entries = [card_entry(store, release, c) for c in cards]
        by_dep: dict[str, list[int]] = {}
        for i, e in enumerate(entries):
            for d in e.deps:
                by_dep.setdefault(d, []).append(i)
        return ReleasePlan(
            key,
            cards,
            entries,
            {d: tuple(v) for d, v in by_dep.items()},
            tuple(i for i, e in enumerate(entries) if e.uses_given),
        )

    plan = cached(key, build)
    return plan if plan.cards is cards else build()
