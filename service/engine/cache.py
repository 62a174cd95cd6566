"""Bounded, thread-safe memo tables for the triage hot path.

The engine answers from a thread pool (FastAPI runs ``Engine.triage`` in
worker threads), so every process-wide cache here is bounded and its writes are
guarded by a lock: :class:`LRUCache` evicts the least recently used entry once it holds
``maxsize`` entries; a lookup takes no lock (a lookup racing an eviction is a miss).
Values are built *outside* the lock (two threads may
build the same entry at once; both get an equal value, the later one is kept),
so a slow build never blocks readers of other keys.

Values derived from one release of the KB (parsed functions, call sites,
the validation order, card plans) go through :func:`cached` under a
:func:`release_key`, which changes when the release is re-indexed. Its hit is
one ``dict.get`` without a lock (the hottest path of a warm triage), and the
table is emptied when it reaches its bound; :func:`recent` re-reads KB values
that only change on re-index (content hashes) at most every few seconds.

Cached values are shared between callers and must be treated as read-only.
Keys that depend on the facts include :func:`facts_signature`.
"""

from __future__ import annotations

import gc
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:
    from kb.store import Store

__all__ = [
    "LRUCache",
    "MembershipTrace",
    "WHOLE_QUESTION",
    "cached",
    "cached_on_members",
    "cached_on_members_seen",
    "clear_all",
    "facts_signature",
    "freeze_long_lived",
    "tune_gc",
    "on_clear_all",
    "recent",
    "release_key",
    "stats",
]

V = TypeVar("V")
T = TypeVar("T")

_MISSING = object()
_registry: list[LRUCache[Any]] = []  # every cache, whatever its values
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
            _registry.append(self)

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable, default: V | None = None) -> V | None:
        """The value under ``key`` (marking it recently used), else ``default``."""
        found = self._find(key)
        return default if found is None else found[0]

    def _find(self, key: Hashable) -> tuple[V] | None:
        """``(value,)`` under ``key`` (marking it recently used; a hit), else None (a miss).

        Without the lock: each of the two steps is one atomic operation on the ordered dict,
        and an entry another thread evicts between them is a miss."""
        data = self._data
        try:
            value = data[key]
            data.move_to_end(key)
        except KeyError:
            self.misses += 1
            return None
        self.hits += 1
        return (value,)

    def put(self, key: Hashable, value: V) -> None:
        """Store ``value`` under ``key``, evicting the oldest entries beyond ``maxsize``."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def get_or_build(self, key: Hashable, build: Callable[[], V]) -> V:
        """The value under ``key``; on a miss ``build()`` it (outside the lock) and store it."""
        found = self._find(key)
        if found is not None:
            return found[0]
        value = build()
        self.put(key, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0


# ------------------------------------------------ values derived from the KB

_kb_lock = threading.Lock()
_kb_cache: dict[tuple[Any, ...], Any] = {}


_MAX_ENTRIES = 50_000
_RECENT_TTL_S = 5.0
_recent: dict[tuple[Any, ...], tuple[float, Any]] = {}


def cached(key: tuple[Any, ...], build: Callable[[], T]) -> T:
    """Memoise ``build()`` under ``key`` (process-wide, bounded, thread-safe).

    A hit is one ``dict.get`` (atomic in CPython, so no lock on the hot path);
    writes, and the clear when the table is full, take the lock.
    """
    hit = _kb_cache.get(key, _MISSING)
    if hit is not _MISSING:
        return cast(T, hit)  # stored by the ``build`` of this key
    value = build()
    with _kb_lock:
        if len(_kb_cache) >= _MAX_ENTRIES:
            _kb_cache.clear()
        _kb_cache[key] = value
    return value


def recent(key: tuple[Any, ...], read: Callable[[], T]) -> T:
    """``read()``, re-run at most every few seconds per ``key`` (for values in the KB
    that change only when it is re-indexed: content hashes, the cards' derivation key).

    A fresh hit is one ``dict.get`` (no lock); the lock only guards writes.
    """
    now = time.monotonic()
    hit = _recent.get(key)
    if hit is None or now - hit[0] > _RECENT_TTL_S:
        hit = (now, read())
        with _kb_lock:
            if len(_recent) >= _MAX_ENTRIES:  # bounded like the release-keyed table
                _recent.clear()
            _recent[key] = hit
    return cast(T, hit[1])  # stored by the ``read`` of this key


def release_key(store: Store, version: str, what: str) -> tuple[Any, ...]:
    """A cache key that changes when the release is re-indexed (hash looked up every few s)."""
    path = str(store.path)
    content_hash = recent(
        ("content-hash", path, version), lambda: (store.release(version) or {}).get("content_hash")
    )
    return (path, version, content_hash, what)


# ------------------------------------- values that read a set only through membership


class MembershipTrace(Collection[str]):
    """``base`` as a build reads it: each answer to ``x in trace`` is recorded, so the
    build's value can be reused for any other set that answers those questions alike.
    Iterating (or taking the length) records a dependence on the whole set."""

    __slots__ = ("base", "seen")

    def __init__(self, base: Collection[str]) -> None:
        self.base = base
        self.seen: dict[tuple[object, object], None] = {}

    def __contains__(self, item: object) -> bool:
        found = item in self.base
        self.seen[(item, found)] = None  # the questions are names: hashable
        return found

    def _whole(self) -> frozenset[str]:
        whole = frozenset(self.base)
        self.seen[(WHOLE_QUESTION, whole)] = None
        return whole

    def __iter__(self) -> Iterator[str]:
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())


WHOLE_QUESTION = object()  # the question "which set is it?" (the build iterated it)


def _answers_alike(seen: tuple[tuple[object, object], ...], keep: Collection[str]) -> bool:
    for item, answer in seen:
        if item is WHOLE_QUESTION:
            if frozenset(keep) != answer:
                return False
        elif (item in keep) != answer:
            return False
    return True


#: per key, this many traces are kept (one per way a set answered the build's questions)
_TRACES_PER_KEY = 8
_traces: LRUCache[tuple[tuple[tuple[tuple[object, object], ...], Any], ...]] = LRUCache(
    "membership-traces", 20_000
)


def cached_on_members(
    key: tuple[Any, ...], keep: Collection[str], build: Callable[[Collection[str]], T]
) -> T:
    """``build(keep)`` memoised on the answers ``keep`` gives to the questions the build
    asks of it (``x in keep``), not on the whole set.

    The build must read ``keep`` only through membership (iterating it makes the whole
    set part of the key) and be a pure function of ``key`` and those answers. A ``keep``
    that is itself a :class:`MembershipTrace` records the questions replayed here, so
    nested builds compose.
    """
    return cached_on_members_seen(key, keep, build)[0]


def cached_on_members_seen(
    key: tuple[Any, ...], keep: Collection[str], build: Callable[[Collection[str]], T]
) -> tuple[T, tuple[tuple[object, object], ...]]:
    """:func:`cached_on_members`, with the (question, answer) pairs the value rests on
    (a question is a name, or :data:`WHOLE_QUESTION` when the build iterated the set)."""
    entries = _traces.get(key) or ()
    for seen, value in entries:
        if _answers_alike(seen, keep):
            return cast(T, value), seen
    trace = MembershipTrace(keep)
    value = build(trace)
    seen = tuple(trace.seen)
    _traces.put(key, (*entries, (seen, value))[-_TRACES_PER_KEY:])
    return value, seen


# ------------------------------------------------------------------ all caches


def clear_all() -> None:
    """Empty every :class:`LRUCache` of the process and every table registered with
    :func:`on_clear_all` (tests; a re-indexed KB needs no call)."""
    with _registry_lock:
        caches = list(_registry)
        hooks = list(_clear_hooks)
    for cache in caches:
        cache.clear()
    for hook in hooks:
        hook()
    with _kb_lock:
        _kb_cache.clear()
        _recent.clear()


_clear_hooks: list[Callable[[], None]] = []


def on_clear_all(clear: Callable[[], None]) -> None:
    """Have :func:`clear_all` call ``clear`` too (a table that is not an :class:`LRUCache`)."""
    with _registry_lock:
        _clear_hooks.append(clear)


def stats() -> dict[str, dict[str, int]]:
    """name -> size, capacity, hits and misses of every cache (for profiling)."""
    with _registry_lock:
        caches = list(_registry)
    return {
        c.name: {"size": len(c), "max": c.maxsize, "hits": c.hits, "misses": c.misses}
        for c in caches
    }


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
        items.append(
            (
                key,
                repr(getattr(v, "value", v)),
                getattr(prov, "kind", None),
                getattr(prov, "detail", None),
            )
        )
    return hashlib.sha1(repr(items).encode()).hexdigest()


#: the collector's thresholds while the engine runs (CPython's default is (700, 10, 10))
GC_THRESHOLDS = (20_000, 5, 100)


def tune_gc() -> None:
    """Collect less often than CPython's default.

    A triage allocates hundreds of thousands of short-lived objects (keys, records, views)
    while the memo tables keep a large heap alive. With the default thresholds, on 150
    never-seen logs after the bench's warm-up, 1,112 collections took 474 ms, and 8 full
    ones paused a request for 36-73 ms each. With :data:`GC_THRESHOLDS` 34 collections took
    about 320 ms, none of them full, the longest 68 ms. Reference counting still frees nearly
    everything; only cyclic garbage waits longer. Set by the engine once.
    """
    gc.set_threshold(*GC_THRESHOLDS)


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
