"""The background replay queue: bounded, fair between clients, one batch at a time.

Each distinct command line costs seconds of CPU, so the queue refuses work
rather than grow: at most ``max_pending`` batches wait in all and at most
``per_client`` from one client. Waiting batches run round-robin by client, so
one client posting many logs cannot starve the others. A refused batch is
answered at once ("unverified: replay queue full"); nothing is dropped silently.
"""

from __future__ import annotations

import collections
import threading
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
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                fut.set_exception(exc)
