"""The Slack bot's in-memory state: per-channel rate limits, event dedupe, thread contexts.

* :class:`TokenBucket` — per-key token buckets (at most ``max_keys`` keys, least recently
  used forgotten); the bot takes one token per post or update in a channel and drops the
  reply when none frees up in time.
* :class:`Seen` — a bounded, expiring set; the bot drops event retries by
  ``event_id`` and a message delivered twice (``app_mention`` and
  ``message.im``) by ``channel:ts``.
* :class:`ThreadStore` — an LRU of :class:`ThreadContext` by
  ``(channel, thread_ts)``: the payload, options and result a thread's
  follow-ups are answered from.

Everything is thread-safe and lives in the process, so without a database HTTP
mode should run a single worker; with ``TRIAGE_DATABASE_URL`` the bot uses the
database-backed versions in :mod:`service.slack.shared` instead. Used by
:mod:`service.slack.bot`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from service.engine import TriageResult

__all__ = ["Seen", "ThreadContext", "ThreadStore", "TokenBucket"]


class TokenBucket:
    """Per-key token buckets: ``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(
        self,
        rate: float = 1.0,
        burst: int = 5,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.max_keys = max_keys  # channels remembered at once, least recently used forgotten
        self._state: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._state)

    def _put(self, key: str, value: tuple[float, float]) -> None:
        self._state[key] = value
        self._state.move_to_end(key)
        while len(self._state) > self.max_keys:
            self._state.popitem(last=False)

    def try_take(self, key: str) -> float:
        """Take a token: 0.0 on success, else the seconds until one is available."""
        with self._lock:
            now = self.clock()
            tokens, last = self._state.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._put(key, (tokens - 1.0, now))
                return 0.0
            self._put(key, (tokens, now))
            return (1.0 - tokens) / self.rate

    def acquire(self, key: str, max_wait: float = 10.0) -> bool:
        """Block until a token is free (True) or ``max_wait`` would be exceeded (False)."""
        deadline = self.clock() + max_wait
        while True:
            wait = self.try_take(key)
            if wait == 0.0:
                return True
            if self.clock() + wait > deadline:
                return False
            time.sleep(min(wait, 0.5))


class Seen:
    """A bounded, expiring set: ``add(key)`` is False when the key was already there."""

    def __init__(self, ttl_s: float = 3600.0, max_items: int = 20_000) -> None:
        self.ttl_s, self.max_items = ttl_s, max_items
        self._items: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            while self._items and (
                len(self._items) >= self.max_items
                or next(iter(self._items.values())) < now - self.ttl_s
            ):
                self._items.popitem(last=False)
            if key in self._items:
                return False
            self._items[key] = now
            return True


@dataclass
class ThreadContext:
    """What a thread's follow-ups are answered from."""

    channel: str
    thread_ts: str
    payload: str
    options: dict[str, str | None]
    tid: str
    result: TriageResult
    updated: float = field(default_factory=time.monotonic)


class ThreadStore:
    """LRU of :class:`ThreadContext` by ``(channel, thread_ts)``."""

    def __init__(self, max_items: int = 2000, ttl_s: float = 7 * 86400.0) -> None:
        self.max_items, self.ttl_s = max_items, ttl_s
        self._items: OrderedDict[tuple[str, str], ThreadContext] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, channel: str, thread_ts: str | None) -> ThreadContext | None:
        if not thread_ts:
            return None
        with self._lock:
            ctx = self._items.get((channel, thread_ts))
            if ctx is None or ctx.updated < time.monotonic() - self.ttl_s:
                return None
            self._items.move_to_end((channel, thread_ts))
            return ctx

    def put(self, ctx: ThreadContext) -> None:
        with self._lock:
            ctx.updated = time.monotonic()
            self._items[(ctx.channel, ctx.thread_ts)] = ctx
            self._items.move_to_end((ctx.channel, ctx.thread_ts))
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
