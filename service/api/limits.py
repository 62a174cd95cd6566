"""Per-client limits of the API, in bounded memory.

* :class:`BoundedDict` — a thread-safe LRU mapping of at most ``maxsize`` entries: every
  table keyed by something a client chooses (an address, a key) is one, so no client can
  grow the process's memory without bound.
* :class:`TokenBuckets` — per-client token buckets: ``rate`` tokens a minute, at most
  ``burst`` saved up.
* :func:`triage_rate_limit` — the dependency of ``POST /triage``: one token per request
  from the caller's bucket (its key, or its address on an open service), else 429 with
  ``Retry-After`` (``TRIAGE_TRIAGE_RATE_PER_MINUTE``, ``TRIAGE_TRIAGE_BURST``; a rate of
  0 turns it off; team keys are not limited). The buckets are per process: with
  ``serve --workers N`` a client may get up to N times the rate.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from fastapi import Depends, HTTPException, Request

from service.settings import Settings

__all__ = ["MAX_CLIENTS", "BoundedDict", "TokenBuckets", "triage_rate_limit"]

K = TypeVar("K")
V = TypeVar("V")

#: Clients whose buckets are kept at once (the least recently seen is forgotten first:
#: a forgotten client starts again with a full bucket).
MAX_CLIENTS = 10_000


class BoundedDict(Generic[K, V]):
    """A thread-safe mapping of at most ``maxsize`` entries, least recently used evicted."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            if key not in self._data:
                return default
            self._data.move_to_end(key)
            return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return self._data.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class TokenBuckets:
    """Per-key token buckets: ``per_minute`` tokens a minute, at most ``burst`` saved up,
    for at most ``max_keys`` keys."""

    def __init__(
        self,
        per_minute: float,
        burst: int,
        *,
        max_keys: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(max(1, burst))
        self.clock = clock
        self._state: BoundedDict[str, tuple[float, float]] = BoundedDict(max_keys)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._state)

    def take(self, key: str) -> float:
        """Take a token: 0.0 on success, else the seconds until one is free."""
        with self._lock:
            now = self.clock()
            tokens, last = self._state.get(key) or (self.burst, now)
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._state[key] = (tokens - 1.0, now)
                return 0.0
            self._state[key] = (tokens, now)
            return (1.0 - tokens) / self.rate if self.rate > 0 else math.inf


_buckets: BoundedDict[tuple[int, float, int], TokenBuckets] = BoundedDict(16)


def buckets_for(app_state: object, settings: Settings) -> TokenBuckets:
    """The app's buckets for the settings' rate (new ones when the rate changes)."""
    key = (id(app_state), settings.triage_rate_per_minute, settings.triage_burst)
    found = _buckets.get(key)
    if found is None:
        found = TokenBuckets(settings.triage_rate_per_minute, settings.triage_burst)
        _buckets[key] = found
    return found


def triage_rate_limit(
    settings_dependency: Callable[..., object],
    owner_of: Callable[[Request, Settings], str | None],
) -> Callable[..., object]:
    """A FastAPI dependency that takes one token of the caller's bucket or answers 429.

    ``settings_dependency`` is the app's own settings dependency (tests override it);
    ``owner_of`` names the caller's bucket (:func:`service.api.access.caller_of`: its key,
    ``key:<hash>``, or on an open service its address, ``client:<address>``; None: not
    limited, a team key). Runs after the key check.
    """

    # the dependency is a default, not an Annotated[...]: with postponed annotations FastAPI
    # could not resolve the local name ``settings_dependency``
    async def limit(request: Request, settings: Settings = Depends(settings_dependency)) -> None:  # noqa: B008
        if settings.triage_rate_per_minute <= 0:
            return
        owner = owner_of(request, settings)
        wait = 0.0 if owner is None else buckets_for(request.app.state, settings).take(owner)
        if wait > 0:
            retry = "3600" if math.isinf(wait) else str(max(1, math.ceil(wait)))
            raise HTTPException(
                429,
                f"too many triages from this client: at most "
                f"{settings.triage_rate_per_minute:g} a minute "
                f"(bursts of {settings.triage_burst}); try again later",
                headers={"Retry-After": retry},
            )

    return limit
