"""A warm replay pool: long-lived sandboxed workers that import a release once.

A cold replay batch (:func:`service.replay.harness._run_batch`) pays 15-20 s of
importing torch and ``sglang.srt.server_args`` before its first fork. The pool
keeps one ``child.py --serve`` process per :class:`WorkerKey` (release tree,
GPU vendor, cache home; each job's own profile is applied in its fork) that does the
setup once and then
validates one job per fork (≈0.4 s each), so a fix search's candidates are
answered in about a second each.

* **Same isolation.** Each worker runs in :func:`service.replay.sandbox.command`
  (namespaces, no network, host read-only, the service's cache hidden) with the
  cold path's environment (:func:`~service.replay.harness._child_env`); only the
  sandbox's CPU limit is higher (:data:`WORKER_CPU_S`, a worker lives long), and
  each fork caps its own CPU seconds near its time limit. The protocol is one JSON
  line per job on the worker's original stdin/stdout, which the child moves off
  fds 0-2 before anything is imported (:func:`child.serve`).
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
* **Thread-safe**: the API calls it from threads; jobs of one worker run one at a
  time, jobs of different workers in parallel. :func:`default_pool` is the
  process's pool, killed at exit (``atexit``).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from service.engine import HardwareProfile
from service.replay import sandbox
from service.replay.errors import ReplayError
from service.replay.harness import CHILD, HARNESS_DIR, STUB_DIRS, _child_env, _tail
from service.replay.plan import hardware_payload, probe_values, stub_plan, substitute_argv

__all__ = ["ANSWER_MARGIN_S", "PoolJob", "PoolUnavailable", "WarmPool", "WorkerKey",
           "default_pool", "unverified"]

#: CPU seconds the sandbox allows a whole worker (import + the worker's own bookkeeping;
#: each fork's CPU is capped near its own time limit by the child)
WORKER_CPU_S = 6 * 3600
#: seconds past a job's own limit before a silent worker is declared hung and killed
ANSWER_MARGIN_S = 15.0
_MAX_LINE = 64 << 20
T = TypeVar("T")


class PoolUnavailable(ReplayError):
    """A warm worker could not be started (the caller falls back to a cold replay)."""


@dataclass(frozen=True)
class WorkerKey:
    """What one warm worker is for: a release tree on one vendor's machines, with a cache home.

    The vendor (``nvidia``, ``amd``, ``cpu``; None: no declared hardware) fixes what the
    worker imports with (the stub plan, the CUDA/ROCm flavour of torch's version); the
    rest of a profile (GPU model, count, memory, compute capability, SGLang's probes) is
    applied per job inside its fork (``child._apply_hardware``), so one worker serves every
    profile of a vendor.
    """

    tree: str
    hardware: str | None  # the vendor of the profiles this worker serves
    home: str

    @classmethod
    def of(cls, tree: Path, hw: HardwareProfile | None, home: Path) -> WorkerKey:
        return cls(str(tree), hw.vendor if hw else None, str(home))


@dataclass
class PoolJob:
    """One command line for a worker. ``env`` applies in the fork only; ``payload`` is a
    test hook (a script run inside the fork before validation, never from a request)."""

    argv: list[str]
    timeout_s: float = 30.0
    env: Mapping[str, str] = field(default_factory=dict)
    payload: Path | None = None
    #: the declared machine of this job (set by :meth:`WarmPool.run`; applied in its fork)
    hw: HardwareProfile | None = None


def unverified(phase: str, reason: str) -> dict[str, Any]:
    """A raw answer for a candidate the pool did not run (``busy``, ``deadline``)."""
    return {"status": "harness_error", "phase": phase, "harness_reason": reason,
            "timings": {"warm": 1.0}}


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _rss_mib(root: int) -> float:
    """Resident memory of a process tree (prlimit/bwrap/python and a running fork), MiB."""
    total = 0
    for pid in _descendants(root):
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return round(total / 1024, 1)


class _Spawner:
    """One thread, alive as long as the process, that starts every worker.

    ``bwrap --die-with-parent`` uses ``PR_SET_PDEATHSIG``, which fires when the *thread*
    that forked the sandbox exits, not the process: a worker started from a request's
    thread would be SIGKILLed when that thread ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._todo: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], T]) -> T:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="replay-pool-spawner",
                                                daemon=True)
                self._thread.start()
        fut: Future[Any] = Future()
        self._todo.put((fn, fut))
        return fut.result()

    def _loop(self) -> None:
        while True:
            fn, fut = self._todo.get()
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)


_SPAWNER = _Spawner()


class _Worker:
    """One sandboxed ``child.py --serve`` process. ``lock`` serialises its jobs; the start
    runs on its own thread so a caller with a deadline can stop waiting without losing it."""

    def __init__(self, key: WorkerKey, hw: HardwareProfile | None, start_timeout_s: float) -> None:
        self.key, self.hw, self.start_timeout_s = key, hw, start_timeout_s
        self.lock = threading.Lock()
        self.users = 0
        self.last_used = time.monotonic()
        self.jobs = 0
        self.starts = 0
        self.start_s: float | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.work: Path | None = None
        self.setup: dict[str, Any] = {}
        self.failure: str | None = None
        self.retired = False
        self._ready = threading.Event()
        self._starter: threading.Thread | None = None
        self._buf = bytearray()
        self._ids = itertools.count(1)

    # ---------------------------------------------------------------- lifecycle

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self._ready.is_set()

    def ensure_started(self) -> None:
        """Start (or restart) the worker in the background unless it runs or is starting."""
        if self.starting():
            return
        if self.alive() and self.failure is None:
            return
        self.stop()
        self._ready.clear()
        self.failure = None
        self._starter = threading.Thread(target=self._start, name="replay-pool-start",
                                         daemon=True)
        self._starter.start()

    def starting(self) -> bool:
        return self._starter is not None and self._starter.is_alive()

    def wait_ready(self, timeout: float) -> bool:
        """Whether the start finished within ``timeout`` (then check :attr:`failure`)."""
        return self._ready.wait(max(0.0, timeout))

    def _start(self) -> None:
        t0 = time.perf_counter()
        try:
            self._spawn()
            line = self._read_line(time.monotonic() + self.start_timeout_s)
            hello = json.loads(line)
            if not isinstance(hello, dict) or not hello.get("ready"):
                raise ValueError(f"unexpected first line {line[:200]!r}")
            self.setup = hello.get("setup") or {}
            self.start_s = round(time.perf_counter() - t0, 3)
            self.starts += 1
        except Exception as exc:  # noqa: BLE001 - any start failure makes the pool unavailable
            log = _tail(self.work / "worker.log") if self.work else ""
            self.failure = f"the warm replay worker did not start: {exc}"[:500] + (
                f"\n{log}" if log else "")
            self.stop()
        finally:
            self._ready.set()

    def _spawn(self) -> None:
        tree, home = Path(self.key.tree), Path(self.key.home)
        (home / "replay-models").mkdir(parents=True, exist_ok=True)  # bound before it has models
        self.work = Path(tempfile.mkdtemp(prefix="sglang-replay-pool-"))
        (self.work / "jobs").mkdir()
        force, fallback = stub_plan(self.hw)
        cfg = {"release_root": str(tree), "stub_dirs": [str(d) for d in STUB_DIRS],
               "force_stubs": force, "fallback_stubs": fallback,
               "hardware": hardware_payload(self.hw), "probes": probe_values(self.hw),
               "forced_failure": None, "log_path": str(self.work / "worker.log"),
               "job_timeout_s": 120, "warmup_argv": substitute_argv(
                   ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp",
                    str(self.hw.count if self.hw else 1)], "LlamaForCausalLM", home)[0]}
        (self.work / "config.json").write_text(json.dumps(cfg))
        cmd = sandbox.command(
            [sys.executable, "-s", str(CHILD), "--serve", str(self.work / "config.json")],
            workdir=self.work, hidden=[home],
            readable=[HARNESS_DIR, tree, home / "replay-models"],
            limits=sandbox.Limits(cpu_s=WORKER_CPU_S))
        env = _child_env(self.work, tree, self.hw, None)
        with open(self.work / "worker.log", "ab") as early:  # before the child redirects
            self.proc = _SPAWNER.call(lambda: subprocess.Popen(
                cmd, cwd=self.work, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=early, start_new_session=True))
        self._buf.clear()
        if self.retired:  # evicted or closed while starting
            raise RuntimeError("the worker was retired while starting")

    def stop(self, retire: bool = False) -> None:
        """Kill the sandbox (its PID namespace takes every process inside) and its folder;
        ``retire``: for good (evicted, idle, closed), a start in progress gives up."""
        self.retired |= retire
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(Exception):
                    stream.close()  # type: ignore[union-attr]
        work, self.work = self.work, None
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)

    # ---------------------------------------------------------------- protocol

    def _read_line(self, deadline: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise EOFError(f"the worker exited ({self.proc.poll()})")
            self._buf += chunk
            if len(self._buf) > _MAX_LINE:
                raise ValueError("an answer longer than the protocol allows")
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf[:] = rest
        return line.decode("utf-8", errors="replace")

    def exchange(self, job: PoolJob) -> dict[str, Any]:
        """Run ``job`` (caller holds :attr:`lock` and saw the worker ready): its raw answer.
        Any protocol failure kills the worker and answers ``harness_error``."""
        assert self.proc is not None and self.proc.stdin is not None and self.work is not None
        job_id = next(self._ids)
        result_path = self.work / "jobs" / f"result-{job_id}.json"
        log_path = self.work / "jobs" / f"log-{job_id}.txt"
        msg: dict[str, Any] = {"id": job_id, "argv": list(job.argv), "timeout_s": job.timeout_s,
                               "result_path": str(result_path), "log_path": str(log_path),
                               "env": dict(job.env)}
        if job.hw is not None:
            msg["hardware"] = hardware_payload(job.hw)
            msg["probes"] = probe_values(job.hw)
        if job.payload is not None:
            target = self.work / "jobs" / f"payload-{job_id}.py"
            target.write_bytes(Path(job.payload).read_bytes())
            msg["payload"] = str(target)
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
            line = self._read_line(time.monotonic() + job.timeout_s + ANSWER_MARGIN_S)
            answer = json.loads(line)
            if not isinstance(answer, dict) or answer.get("id") != job_id \
                    or not isinstance(answer.get("result"), dict):
                raise ValueError(f"not the answer to job {job_id}: {line[:200]!r}")
            raw: dict[str, Any] = answer["result"]
        except TimeoutError:
            raw = {"status": "harness_error", "phase": "timeout", "harness_reason":
                   f"the warm replay worker did not answer within "
                   f"{job.timeout_s + ANSWER_MARGIN_S:.0f}s (worker killed)"}
            self.stop()
        except (OSError, EOFError, ValueError) as exc:
            raw = {"status": "harness_error", "phase": "crash", "harness_reason":
                   f"the warm replay worker failed ({type(exc).__name__}: {exc}; "
                   f"worker killed)"[:600]}
            self.stop()
        raw["log_tail"] = _tail(log_path) if self.work else ""
        with contextlib.suppress(OSError):
            log_path.unlink()
        raw.setdefault("timings", {})["roundtrip_s"] = time.perf_counter() - t0
        self.jobs += 1
        self.last_used = time.monotonic()
        return raw

    def stats(self) -> dict[str, Any]:
        tree = Path(self.key.tree)
        return {"release": tree.name, "tree": str(tree), "vendor": self.key.hardware,
                "started_with": self.hw.name if self.hw else None,
                "alive": self.alive(), "pid": self.proc.pid if self.proc else None,
                "start_s": self.start_s, "starts": self.starts, "jobs": self.jobs,
                "busy": self.users > 0, "idle_s": round(time.monotonic() - self.last_used, 1),
                "rss_mib": _rss_mib(self.proc.pid) if self.alive() and self.proc else 0.0}


class WarmPool:
    """Warm replay workers, one per :class:`WorkerKey` (see the module docstring)."""

    def __init__(self, max_workers: int = 2, idle_timeout_s: float = 600.0,
                 max_waiting: int = 64, start_timeout_s: float = 180.0) -> None:
        self.max_workers = max(1, max_workers)
        self.idle_timeout_s = idle_timeout_s
        self.max_waiting = max_waiting
        self.start_timeout_s = start_timeout_s
        self._workers: OrderedDict[WorkerKey, _Worker] = OrderedDict()
        self._cond = threading.Condition()
        self._waiting = 0
        self._served = 0
        self._refused = 0
        self._closed = False
        self._reaper: threading.Thread | None = None

    # ---------------------------------------------------------------- public API

    def run(self, tree: Path, hw: HardwareProfile | None, home: Path, jobs: Sequence[PoolJob],
            *, deadline: float | None = None,
            start_wait_s: float | None = None) -> list[dict[str, Any] | None]:
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
        start_by = t_submit + (self.start_timeout_s if start_wait_s is None
                               else min(start_wait_s, self.start_timeout_s))
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
        worker: _Worker | None = None
        try:
            worker = self._acquire(WorkerKey.of(tree, hw, home), hw, deadline)
            if worker is None:
                for i in admitted:
                    out[i] = unverified("busy", "the replay pool is full (every worker busy); "
                                                "not replayed (unverified)")
                return out
            restarted = False
            for i in admitted:
                raw = self._one(worker, dataclasses.replace(jobs[i], hw=hw), deadline,
                                start_by, restarted)
                with self._cond:
                    self._waiting -= 1
                    pending -= 1
                if raw is None:  # the worker cannot start: the rest go cold
                    break
                restarted |= bool(raw.pop("_restarted", False))
                raw.setdefault("timings", {}).update(
                    pool_wait_s=raw.pop("_wait_s", 0.0), warm=1.0)
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

    def stats(self) -> dict[str, Any]:
        """For ``/metrics``: workers (release, hardware, start seconds, RSS MiB, jobs),
        candidates waiting, jobs served and refused."""
        with self._cond:
            workers = list(self._workers.values())
            out = {"max_workers": self.max_workers, "queue_depth": self._waiting,
                   "jobs_served": self._served, "refused": self._refused}
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

    def _one(self, worker: _Worker, job: PoolJob, deadline: float | None, start_by: float,
             restarted: bool) -> dict[str, Any] | None:
        t0 = time.monotonic()
        if not worker.lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - t0)):
            return unverified("deadline", "the deadline passed while this candidate waited for "
                              "the worker (unverified)")
        try:
            was_alive = worker.alive()
            if not was_alive and restarted:
                return None  # died twice in one batch: let the cold path have the rest
            worker.ensure_started()
            limit = start_by if deadline is None else min(start_by, deadline)
            if not worker.wait_ready(limit - time.monotonic()):
                if deadline is not None and time.monotonic() >= deadline - 0.01:
                    return unverified("deadline", "the deadline passed before this candidate "
                                      "was replayed (worker still starting; unverified)")
                if worker.starting():
                    return {"status": "harness_error", "phase": "timeout", "harness_reason":
                            f"the warm replay worker did not start within "
                            f"{start_by - t0:.0f}s (it keeps starting for the next call)"}
                return None
            if worker.failure is not None:
                return None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0.5:
                return unverified("deadline", "the deadline passed before this candidate "
                                  "was replayed (unverified)")
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

    def _acquire(self, key: WorkerKey, hw: HardwareProfile | None,
                 deadline: float | None) -> _Worker | None:
        """The worker for ``key`` (marked in use), evicting the least recently used idle one
        over ``max_workers``; None when every worker stays busy until the deadline."""
        give_up = time.monotonic() + (self.start_timeout_s if deadline is None
                                      else max(0.0, deadline - time.monotonic()))
        victims: list[_Worker] = []
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
                    worker = _Worker(key, hw, self.start_timeout_s)
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
            self._reaper = threading.Thread(target=self._reap, name="replay-pool-reaper",
                                            daemon=True)
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
                idle = [w for w in self._workers.values()
                        if w.users == 0 and now - w.last_used >= self.idle_timeout_s]
                for worker in idle:
                    del self._workers[worker.key]
            for worker in idle:
                worker.stop(retire=True)


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
