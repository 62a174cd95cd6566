"""A warm replay pool: long-lived sandboxed workers that import a release once.

A cold replay batch (:func:`service.replay.batches.run_cold`) pays 15-20 s of
importing torch and ``sglang.srt.server_args`` before its first fork. The pool
keeps one ``child/serve.py`` process per :class:`WorkerKey` (release tree, GPU model,
cache home: what SGLang reads of the machine while importing; a job's GPU count and
memory are applied in its fork) that does the setup once and then
validates one job per fork (≈0.4 s each), so a fix search's candidates are
answered in about a second each.

* **Same isolation.** Each worker runs in :func:`service.replay.sandbox.command`
  (namespaces, no network, host read-only, the service's cache hidden) with the
  cold path's environment (:func:`~service.replay.launch.child_env`); only the
  sandbox's CPU limit is higher (:data:`WORKER_CPU_S`, a worker lives long), and
  each fork caps its own CPU seconds near its time limit. The protocol is one JSON
  line per job on the worker's original stdin/stdout, which the child moves off
  fds 0-2 before anything is imported (``serve`` in ``child/serve.py``).
* **Environment per job.** ``env`` is applied in the fork only, after SGLang was
  imported: a variable SGLang reads at *import* time (rare; its ``envs`` are read
  when used) is seen by the cold path but not here.
* **Bounded.** At most ``max_workers`` workers (least recently used idle one
  evicted), each stopped after ``idle_timeout_s`` unused, and at most
  ``max_waiting`` candidates admitted and not yet started: beyond it a candidate
  is answered at once as ``harness_error`` with phase ``busy`` ("the replay pool
  is full"), i.e. *unverified*, never cached. A candidate whose caller's deadline
  passes before it ran gets phase ``deadline``.
* **Failures.** A fork that times out or crashes is the child's business (a
  ``timeout``/``crash`` verdict, the worker keeps serving). A worker that dies,
  does not answer within the job's limit plus :data:`ANSWER_MARGIN_S`, or writes
  something that is not its answer is killed; that candidate gets
  ``harness_error`` (phase ``crash``/``timeout``) and the next use starts a new
  worker. Jobs a worker could not be started for (or that died twice in one call)
  come back as ``None`` from :meth:`WarmPool.run`: the caller replays them cold.
* **Layout.** The worker processes themselves (start, protocol, stop) are
  :mod:`service.replay.pool.workers`; :mod:`service.replay.pool.warm` admits, routes,
  evicts and reaps.
* **Thread-safe**: the API calls it from threads; jobs of one worker run one at a
  time, jobs of different workers in parallel. :func:`default_pool` is the
  process's pool, killed at exit (``atexit``).
"""

from __future__ import annotations

import atexit
import threading

from service.replay.pool.warm import PoolUnavailable, WarmPool, unverified
from service.replay.pool.workers import ANSWER_MARGIN_S, WORKER_CPU_S, PoolJob, WorkerKey

__all__ = [
    "ANSWER_MARGIN_S",
    "WORKER_CPU_S",
    "PoolJob",
    "PoolUnavailable",
    "WarmPool",
    "WorkerKey",
    "default_pool",
    "unverified",
]


_DEFAULT: WarmPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> WarmPool:
    """The process's pool (two workers, 10 minutes idle, 64 waiting), killed at exit."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = WarmPool()
            atexit.register(_DEFAULT.close)
        return _DEFAULT
