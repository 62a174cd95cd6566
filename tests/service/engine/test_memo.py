"""The bounded, thread-safe memo tables of the triage hot path (no KB needed)."""

from __future__ import annotations

import threading
from collections.abc import Collection

import pytest

from service.engine.cache import LRUCache, clear_all, facts_signature, on_clear_all, stats
from service.engine.expr.interpreter import Provenance, Value


def test_lru_evicts_the_least_recently_used_entry() -> None:
    cache: LRUCache[int] = LRUCache("test.lru", 3)
    for k in "abc":
        cache.put(k, ord(k))
    assert cache.get("a") == ord("a")  # "a" is now the most recently used
    cache.put("d", 4)
    assert len(cache) == 3
    assert cache.get("b") is None  # the oldest one went
    assert [cache.get(k) for k in "acd"] == [ord("a"), ord("c"), 4]


def test_get_or_build_builds_once_and_caches_none_free_values() -> None:
    cache: LRUCache[list[int]] = LRUCache("test.build", 8)
    calls: list[int] = []

    def build() -> list[int]:
        calls.append(1)
        return [1, 2]

    first = cache.get_or_build("k", build)
    assert cache.get_or_build("k", build) is first
    assert len(calls) == 1
    assert cache.hits >= 1 and cache.misses >= 1


def test_size_stays_bounded_under_concurrent_writers() -> None:
    """Lookups take no lock: one racing an eviction is a miss, never another value or an
    error."""
    cache: LRUCache[int] = LRUCache("test.threads", 50)
    wrong: list[object] = []

    def writer(offset: int) -> None:
        for i in range(2000):
            cache.put((offset, i), i)
            got = cache.get((offset, i // 2))
            if got not in (None, i // 2):
                wrong.append(got)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 50 and wrong == []


def test_clear_all_and_stats_cover_every_cache() -> None:
    cache: LRUCache[int] = LRUCache("test.registry", 4)
    cache.put(1, 1)
    assert stats()["test.registry"]["size"] == 1
    table = {"k": 1}
    on_clear_all(table.clear)  # a plain table registered with clear_all
    clear_all()
    assert len(cache) == 0 and stats()["test.registry"]["size"] == 0
    assert table == {}


def test_maxsize_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LRUCache("test.bad", 0)


def test_facts_signature_sees_values_and_provenance_not_order() -> None:
    a = {
        "is_cuda()": Value(True, Provenance("fact", "profile x")),
        "model_arch": Value("DeepseekV3ForCausalLM", Provenance("fact", "arch")),
    }
    same = dict(reversed(list(a.items())))
    other_value = {**a, "is_cuda()": Value(False, Provenance("fact", "profile x"))}
    other_source = {**a, "is_cuda()": Value(True, Provenance("fact", "profile y"))}
    one_vs_true = {**a, "is_cuda()": Value(1, Provenance("fact", "profile x"))}
    sig = facts_signature(a)
    assert facts_signature(same) == sig
    assert (
        len(
            {
                sig,
                facts_signature(other_value),
                facts_signature(other_source),
                facts_signature(one_vs_true),
                facts_signature({}),
            }
        )
        == 5
    )


def test_freeze_long_lived_moves_objects_out_of_collections() -> None:
    import gc

    from service.engine.cache import freeze_long_lived

    keep = [[i] for i in range(1000)]  # long-lived, GC-tracked objects
    freeze_long_lived()
    try:
        assert gc.get_freeze_count() >= len(keep)
        assert keep[999] == [999]  # still alive and usable
    finally:
        gc.unfreeze()


def test_cached_on_members_reuses_a_build_for_sets_that_answer_its_questions_alike() -> None:
    from service.engine.cache import cached_on_members

    calls: list[frozenset[str]] = []

    def build(keep: Collection[str]) -> str:
        calls.append(frozenset(k for k in ("a", "b") if k in keep))
        return "a" if "a" in keep else "-"

    key = ("test-members", object())
    assert cached_on_members(key, {"a", "x"}, build) == "a"
    assert cached_on_members(key, {"a", "y", "z"}, build) == "a"  # same answers: reused
    assert len(calls) == 1
    assert cached_on_members(key, {"b"}, build) == "-"  # "a" answered otherwise: built
    assert cached_on_members(key, {"a", "b"}, build) == "a"  # "b" answered otherwise
    assert len(calls) == 3


def test_cached_on_members_nests_and_iteration_makes_the_whole_set_count() -> None:
    from service.engine.cache import cached_on_members

    inner_key, outer_key, whole_key = ("inner", object()), ("outer", object()), ("w", object())
    builds = {"inner": 0, "outer": 0, "whole": 0}

    def inner(keep: Collection[str]) -> bool:
        builds["inner"] += 1
        return "n" in keep

    def outer(keep: Collection[str]) -> bool:
        builds["outer"] += 1
        return cached_on_members(inner_key, keep, inner)

    # the outer build asks nothing itself: the inner one's question is replayed onto it
    assert cached_on_members(outer_key, {"n"}, outer) is True
    assert cached_on_members(outer_key, {"m"}, outer) is False
    assert builds == {"inner": 2, "outer": 2, "whole": 0}

    def whole(keep: Collection[str]) -> int:
        builds["whole"] += 1
        return len(sorted(keep))

    assert cached_on_members(whole_key, {"a"}, whole) == 1
    assert cached_on_members(whole_key, {"b"}, whole) == 1  # another set: built again
    assert cached_on_members(whole_key, {"a"}, whole) == 1
    assert builds["whole"] == 2
