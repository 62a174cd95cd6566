"""The warm pool itself: admits candidates, routes them to their worker, evicts and reaps
workers (:class:`WarmPool`; see :mod:`service.replay.pool` for what it guarantees).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.engine import HardwareProfile
from service.replay.errors import ReplayError
from service.replay.pool.workers import PoolJob, WarmWorker, WorkerKey

__all__ = ["PoolUnavailable", "WarmPool", "unverified"]


class PoolUnavailable(ReplayError):
    """A warm worker could not be started (the caller falls back to a cold replay)."""


def unverified(phase: str, reason: str) -> dict[str, Any]:
    """A raw answer for a candidate the pool did not run (``busy``, ``deadline``)."""
    return {
        "status": "harness_error",
        "phase": phase,
        "harness_reason": reason,
        "timings": {"warm": 1.0},
    }


class WarmPool:
    """Warm replay workers, one per :class:`WorkerKey` (see the module docstring)."""

    def __init__(
        self,
        max_workers: int = 2,
        idle_timeout_s: float = 600.0,
        max_waiting: int = 64,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.max_workers = max(1, max_workers)
        self.idle_timeout_s = idle_timeout_s
        self.max_waiting = max_waiting
        self.start_timeout_s = start_timeout_s
        self._workers: OrderedDict[WorkerKey, WarmWorker] = OrderedDict()
        self._cond = threading.Condition()
        self._waiting = 0
        self._served = 0
        self._refused = 0
        self._closed = False
        self._reaper: threading.Thread | None = None

    # ---------------------------------------------------------------- public API

    def run(
        self,
        tree: Path,
        hw: HardwareProfile | None,
        home: Path,
        jobs: Sequence[PoolJob],
        *,
        deadline: float | None = None,
        start_wait_s: float | None = None,
    ) -> list[dict[str, Any] | None]:
        """Validate ``jobs`` on the warm worker of (``tree``, ``hw``, ``home``), in order.

        Returns one raw child answer per job (``log_tail`` and ``timings`` with
        ``pool_wait_s``, ``roundtrip_s``, ``warm``=1 added): a verdict, or
        ``harness_error`` with phase ``busy`` (over ``max_waiting``), ``deadline``
        (``deadline``, a :func:`time.monotonic` instant, passed before the job ran),
        ``timeout``/``crash`` (also when the worker is not ready ``start_wait_s`` after
        the call: it keeps starting for the next one); ``None`` for jobs not run because
        the worker could not start (fall back to the cold path). Raises nothing for a
        busy pool.
        """
        t_submit = time.monotonic()
        start_by = t_submit + (
            self.start_timeout_s
            if start_wait_s is None
            else min(start_wait_s, self.start_timeout_s)
        )
        out: list[dict[str, Any] | None] = [None] * len(jobs)
        with self._cond:
            if self._closed:
                raise PoolUnavailable("the replay pool is closed")
            room = max(0, self.max_waiting - self._waiting)
            admitted = list(range(min(room, len(jobs))))
            for i in range(len(admitted), len(jobs)):
                out[i] = unverified("busy", "the replay pool is full; not replayed (unverified)")
                self._refused += 1
            self._waiting += len(admitted)
        if not admitted:
            return out
        pending = len(admitted)
        worker: WarmWorker | None = None
        try:
            worker = self._acquire(WorkerKey.of(tree, hw, home), hw, deadline)
            if worker is None:
                for i in admitted:
                    out[i] = unverified(
                        "busy",
                        "the replay pool is full (every worker busy); not replayed (unverified)",
                    )
                return out
            restarted = False
            for i in admitted:
                raw = self._one(
                    worker, dataclasses.replace(jobs[i], hw=hw), deadline, start_by, restarted
                )
                with self._cond:
                    self._waiting -= 1
                    pending -= 1
                if raw is None:  # the worker cannot start: the rest go cold
                    break
                if raw.get("phase") == "machine_bound":  # this one goes cold (WorkerKey)
                    continue
                restarted |= bool(raw.pop("_restarted", False))
                raw.setdefault("timings", {}).update(pool_wait_s=raw.pop("_wait_s", 0.0), warm=1.0)
                if raw.get("phase") == "deadline":
                    raw["timings"]["pool_wait_s"] = time.monotonic() - t_submit
                out[i] = raw
            return out
        finally:
            with self._cond:
                self._waiting -= pending
                if worker is not None:
                    worker.users -= 1
                    worker.last_used = time.monotonic()
                self._cond.notify_all()

    def prestart(self, tree: Path, hw: HardwareProfile | None, home: Path) -> bool:
        """Start the worker of (``tree``, ``hw``, ``home``) in the background, without waiting
        (a caller that knows which release and machine it will replay next overlaps the
        start with its own work). Evicts like :meth:`run`; False when the pool is closed or
        every worker is busy."""
        with self._cond:
            if self._closed:
                return False
        worker = self._acquire(WorkerKey.of(tree, hw, home), hw, time.monotonic())
        if worker is None:
            return False
        try:
            if worker.lock.acquire(blocking=False):  # else it is serving a job: it runs
                try:
                    worker.ensure_started()
                finally:
                    worker.lock.release()
        finally:
            with self._cond:
                worker.users -= 1
                worker.last_used = time.monotonic()
                self._cond.notify_all()
        return True

    def stats(self) -> dict[str, Any]:
        """For ``/metrics``: workers (release, hardware, start seconds, RSS MiB, jobs),
        candidates waiting, jobs served and refused."""
        with self._cond:
            workers = list(self._workers.values())
            out = {
                "max_workers": self.max_workers,
                "queue_depth": self._waiting,
                "jobs_served": self._served,
                "refused": self._refused,
            }
        out["workers"] = [w.stats() for w in workers]
        return out

    def close(self) -> None:
        """Kill every worker; later :meth:`run` calls raise :class:`PoolUnavailable`."""
        with self._cond:
            self._closed = True
            workers = list(self._workers.values())
            self._workers.clear()
            self._cond.notify_all()
        for worker in workers:
            worker.stop(retire=True)

    def kill_worker(self, tree: Path, hw: HardwareProfile | None, home: Path) -> bool:
        """Kill that worker's processes as a crash would (tests, operations); it restarts
        on next use. Whether there was one running."""
        with self._cond:
            worker = self._workers.get(WorkerKey.of(tree, hw, home))
        if worker is None or worker.proc is None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.proc.pid, signal.SIGKILL)
        return True

    # ---------------------------------------------------------------- internals

    def _one(
        self,
        worker: WarmWorker,
        job: PoolJob,
        deadline: float | None,
        start_by: float,
        restarted: bool,
    ) -> dict[str, Any] | None:
        t0 = time.monotonic()
        if not worker.lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - t0)):
            return unverified(
                "deadline",
                "the deadline passed while this candidate waited for the worker (unverified)",
            )
        try:
            was_alive = worker.alive()
            if not was_alive and restarted:
                return None  # died twice in one batch: let the cold path have the rest
            worker.ensure_started()
            limit = start_by if deadline is None else min(start_by, deadline)
            if not worker.wait_ready(limit - time.monotonic()):
                if deadline is not None and time.monotonic() >= deadline - 0.01:
                    return unverified(
                        "deadline",
                        "the deadline passed before this candidate "
                        "was replayed (worker still starting; unverified)",
                    )
                if worker.starting():
                    return {
                        "status": "harness_error",
                        "phase": "timeout",
                        "harness_reason": f"the warm replay worker did not start within "
                        f"{start_by - t0:.0f}s (it keeps starting for the next call)",
                    }
                return None
            if worker.failure is not None:
                return None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0.5:
                return unverified(
                    "deadline",
                    "the deadline passed before this candidate was replayed (unverified)",
                )
            if left is not None and left < job.timeout_s:
                job = dataclasses.replace(job, timeout_s=max(1.0, left))
            wait_s = time.monotonic() - t0
            raw = worker.exchange(job)
        finally:
            worker.lock.release()
        with self._cond:
            self._served += 1
        raw["_wait_s"] = wait_s
        raw["_restarted"] = not was_alive and worker.starts > 1
        return raw

    def _acquire(
        self, key: WorkerKey, hw: HardwareProfile | None, deadline: float | None
    ) -> WarmWorker | None:
        """The worker for ``key`` (marked in use), evicting the least recently used idle one
        over ``max_workers``; None when every worker stays busy until the deadline."""
        give_up = time.monotonic() + (
            self.start_timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
        )
        victims: list[WarmWorker] = []
        with self._cond:
            while True:
                worker = self._workers.get(key)
                if worker is not None:
                    self._workers.move_to_end(key)
                    break
                while len(self._workers) >= self.max_workers:
                    idle = next((w for w in self._workers.values() if w.users == 0), None)
                    if idle is None:
                        break
                    victims.append(self._workers.pop(idle.key))
                if len(self._workers) < self.max_workers:
                    worker = WarmWorker(key, hw, self.start_timeout_s)
                    self._workers[key] = worker
                    break
                left = give_up - time.monotonic()
                if left <= 0 or self._closed:
                    return None
                self._cond.wait(min(left, 1.0))
            worker.users += 1
            self._start_reaper()
        for victim in victims:
            victim.stop(retire=True)
        return worker

    def _start_reaper(self) -> None:
        if self._reaper is None and self.idle_timeout_s > 0:
            self._reaper = threading.Thread(
                target=self._reap, name="replay-pool-reaper", daemon=True
            )
            self._reaper.start()

    def _reap(self) -> None:
        """Stop workers unused for ``idle_timeout_s`` (checked a few times per timeout)."""
        interval = max(0.5, min(30.0, self.idle_timeout_s / 4))
        while True:
            with self._cond:
                if self._closed:
                    return
                self._cond.wait(interval)
                now = time.monotonic()
                idle = [
                    w
                    for w in self._workers.values()
                    if w.users == 0 and now - w.last_used >= self.idle_timeout_s
                ]
                for worker in idle:
                    del self._workers[worker.key]
            for worker in idle:
                worker.stop(retire=True)
