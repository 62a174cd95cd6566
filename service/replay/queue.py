"""The background replay queue: bounded, fair between clients, one batch at a time.

Each distinct command line costs seconds of CPU, so the queue refuses work
rather than grow: at most ``max_pending`` batches wait in all and at most
``per_client`` from one client. Waiting batches run round-robin by client, so
one client posting many logs cannot starve the others. A refused batch is
answered at once ("unverified: replay queue full"); nothing is dropped silently.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from service.replay.errors import ReplayError

__all__ = ["QueueFull", "ReplayQueue"]


class QueueFull(ReplayError):
    """The replay queue (or this client's share of it) is full."""


class ReplayQueue:
    """A single worker thread draining per-client queues round-robin."""

    def __init__(self, max_pending: int = 16, per_client: int = 4) -> None:
        self.max_pending = max_pending
        self.per_client = per_client
        self._queues: collections.OrderedDict[str, collections.deque] = collections.OrderedDict()
        self._pending = 0
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._listeners: list[Callable[[float, bool], None]] = []

    def add_listener(self, fn: Callable[[float, bool], None]) -> None:
        """Call ``fn(seconds, ok)`` after each batch ends: its run time (not its wait) and
        whether it returned (metrics; a listener that raises is ignored)."""
        self._listeners.append(fn)

    def depth(self) -> int:
        """Batches waiting (not counting the one running)."""
        with self._cond:
            return self._pending

    def submit(self, client: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """Queue ``fn(*args, **kwargs)`` for ``client``; raises :class:`QueueFull` over a bound."""
        fut: Future = Future()
        with self._cond:
            mine = self._queues.get(client)
            if self._pending >= self.max_pending:
                raise QueueFull(f"replay queue full ({self.max_pending} batches waiting)")
            if mine is not None and len(mine) >= self.per_client:
                raise QueueFull(f"replay queue full for this client ({self.per_client} waiting)")
            self._queues.setdefault(client, collections.deque()).append((fut, fn, args, kwargs))
            self._pending += 1
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="replay", daemon=True)
                self._worker.start()
            self._cond.notify()
        return fut

    def _next(self) -> tuple[Future, Callable[..., Any], tuple, dict]:
        with self._cond:
            while not self._pending:
                self._cond.wait()
            client, queue = next(iter(self._queues.items()))
            job = queue.popleft()
            del self._queues[client]
            if queue:  # back of the line: the next client goes first
                self._queues[client] = queue
            self._pending -= 1
            return job

    def _run(self) -> None:
        while True:
            fut, fn, args, kwargs = self._next()
            if not fut.set_running_or_notify_cancel():
                continue
            t0 = time.perf_counter()
            try:
                value, error = fn(*args, **kwargs), None
            except BaseException as exc:
                value, error = None, exc
            self._ended(time.perf_counter() - t0, error is None)  # before the waiter wakes
            if error is None:
                fut.set_result(value)
            else:
                fut.set_exception(error)

    def _ended(self, seconds: float, ok: bool) -> None:
        for listener in list(self._listeners):
            with contextlib.suppress(Exception):  # metrics must not stop the queue
                listener(seconds, ok)
