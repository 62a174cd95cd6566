"""Bounded, thread-safe memo tables for the triage hot path.

The engine answers from a thread pool (FastAPI runs ``Engine.triage`` in
worker threads), so every process-wide cache here is guarded by a lock and
bounded: :class:`LRUCache` evicts the least recently used entry once it holds
``maxsize`` entries. Values are built *outside* the lock (two threads may
build the same entry at once; both get an equal value, the later one is kept),
so a slow build never blocks readers of other keys.

Cached values are shared between callers and must be treated as read-only.
Keys that depend on the KB's content include
:func:`~service.engine.evaluate.chain.release_key` (which changes when a release
is re-indexed); keys that depend on the facts include :func:`facts_signature`.
"""

from __future__ import annotations

import gc
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

__all__ = ["LRUCache", "clear_all", "facts_signature", "freeze_long_lived", "stats"]

V = TypeVar("V")

_MISSING = object()
_registry: list[LRUCache[object]] = []
_registry_lock = threading.Lock()


class LRUCache(Generic[V]):
    """A mapping of at most ``maxsize`` entries, least recently used evicted first."""

    def __init__(self, name: str, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.name = name
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        with _registry_lock:
            _registry.append(self)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable, default: V | None = None) -> V | None:
        """The value under ``key`` (marking it recently used), else ``default``."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
                return default
            self.hits += 1
            self._data.move_to_end(key)
            return value  # type: ignore[return-value]

    def put(self, key: Hashable, value: V) -> None:
        """Store ``value`` under ``key``, evicting the oldest entries beyond ``maxsize``."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def get_or_build(self, key: Hashable, build: Callable[[], V]) -> V:
        """The value under ``key``; on a miss ``build()`` it (outside the lock) and store it."""
        value = self.get(key, _MISSING)  # type: ignore[arg-type]
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        value = build()
        self.put(key, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0


def clear_all() -> None:
    """Empty every :class:`LRUCache` of the process (tests; a re-indexed KB needs no call)."""
    with _registry_lock:
        caches = list(_registry)
    for cache in caches:
        cache.clear()


def stats() -> dict[str, dict[str, int]]:
    """name -> size, capacity, hits and misses of every cache (for profiling)."""
    with _registry_lock:
        caches = list(_registry)
    return {c.name: {"size": len(c), "max": c.maxsize, "hits": c.hits, "misses": c.misses}
            for c in caches}


def facts_signature(facts: Mapping[str, object]) -> str:
    """A digest of ``facts``: every key with its value's ``repr`` and provenance.

    Two fact maps with the same signature give every evaluation the same
    inputs *and* the same explanations (provenance is part of an atom's input),
    so results computed under one can be reused under the other.
    """
    items = []
    for key in sorted(facts):
        v = facts[key]
        prov = getattr(v, "provenance", None)
        items.append((key, repr(getattr(v, "value", v)), getattr(prov, "kind", None),
                      getattr(prov, "detail", None)))
    return hashlib.sha1(repr(items).encode()).hexdigest()


def freeze_long_lived() -> None:
    """Move every object alive now into the garbage collector's permanent generation.

    A cold request builds long-lived state (catalogs, card plans, parse trees,
    the query encoder): ~1M tracked objects once warm. CPython's full
    collections rescan all of them and pause every thread meanwhile (over a
    second on this workload), which is what a warm request's p99 then sees.
    ``gc.freeze()`` is O(1) and takes them out of later collections; objects
    freed afterwards (an evicted cache entry) are still reclaimed by reference
    counting, only cyclic garbage alive at this moment would stay. Called by the
    engine after a slow (cold) triage.
    """
    gc.freeze()
