"""A writable view over a mapping that is only read: writes land in a front dict.

:class:`collections.ChainMap` does the same for any number of maps, but each lookup goes
through ``__contains__`` over a generator; the fold and the rule checker look attributes up
millions of times per eval run, so this two-level overlay answers a lookup with two dict
probes at most. Lookups, membership, length and iteration order are those of
``ChainMap(front, back)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import TypeVar, overload

__all__ = ["Overlay"]

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_MISSING = object()


class Overlay(MutableMapping[K, V]):
    """``back`` seen through ``front``: reads look in ``front`` first, writes and deletes
    touch ``front`` only (``back`` is never changed)."""

    __slots__ = ("back", "front")

    def __init__(self, back: Mapping[K, V], front: dict[K, V] | None = None) -> None:
        self.back = back
        self.front: dict[K, V] = {} if front is None else front

    def __getitem__(self, key: K) -> V:
        try:
            return self.front[key]
        except KeyError:
            return self.back[key]

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D, /) -> V | D: ...
    def get(self, key: K, default: object = None, /) -> object:
        hit = self.front.get(key, _MISSING)
        return self.back.get(key, default) if hit is _MISSING else hit

    def __contains__(self, key: object) -> bool:
        return key in self.front or key in self.back

    def __setitem__(self, key: K, value: V) -> None:
        self.front[key] = value

    def __delitem__(self, key: K) -> None:
        del self.front[key]  # KeyError when only ``back`` holds it, as ChainMap's

    def __iter__(self) -> Iterator[K]:
        # ChainMap's order: the back map's keys, then the front's new ones
        return iter({**dict.fromkeys(self.back), **dict.fromkeys(self.front)})

    def __len__(self) -> int:
        return len(self.back.keys() | self.front.keys())

    def __repr__(self) -> str:
        return f"Overlay({self.back!r}, front={self.front!r})"
