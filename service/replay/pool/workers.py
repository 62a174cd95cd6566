"""The warm replay pool's workers: one sandboxed ``child/serve.py`` process each.

:class:`WorkerKey` says what a worker is for and :class:`PoolJob` is one command line
for it; :class:`WarmWorker` starts the process (in :func:`service.replay.sandbox.command`,
with the cold path's environment from :mod:`service.replay.launch`), speaks the one
JSON line per job protocol with it and kills it. Every worker is started from one
long-lived thread (:class:`_Spawner`). :class:`service.replay.pool.warm.WarmPool` decides
which worker runs what (see :mod:`service.replay.pool`).
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from service.engine import HardwareProfile
from service.replay import sandbox
from service.replay.launch import CHILD_SERVE, HARNESS_DIR, STUB_DIRS, child_env, log_tail
from service.replay.plan import generated_paths, hardware_payload, probe_values, stub_plan

__all__ = [
    "ANSWER_MARGIN_S",
    "WORKER_CPU_S",
    "PoolJob",
    "WarmWorker",
    "WorkerKey",
    "machine_of",
]

#: CPU seconds the sandbox allows a whole worker (import + the worker's own bookkeeping;
#: each fork's CPU is capped near its own time limit by the child)
WORKER_CPU_S = 6 * 3600
#: seconds past a job's own limit before a silent worker is declared hung and killed
ANSWER_MARGIN_S = 15.0
_MAX_LINE = 64 << 20
T = TypeVar("T")


@dataclass(frozen=True)
class WorkerKey:
    """What one warm worker is for: a release tree on one kind of machine, with a cache home.

    The machine (:func:`machine_of`: vendor, GPU model, compute capability, CUDA; None: no
    declared hardware) is what SGLang may read while it is *imported*: module constants
    such as ``ENABLE_JIT_DEEPGEMM`` or a GPU-name check are computed once, at import, from
    the GPU the worker was set up with, so a worker never serves another GPU model. The GPU
    count and memory (and the probes that follow from them) are applied per job inside its
    fork (``child/serve.py``'s ``_apply_hardware``); a job whose count or memory differs from the
    setup's in a fact the release read at import is answered ``machine_bound`` and goes to
    the cold path (:meth:`service.replay.pool.warm.WarmPool.run`).
    """

    tree: str
    hardware: str | None  # the machine this worker serves (machine_of)
    home: str

    @classmethod
    def of(cls, tree: Path, hw: HardwareProfile | None, home: Path) -> WorkerKey:
        return cls(str(tree), machine_of(hw), str(home))


def machine_of(hw: HardwareProfile | None) -> str | None:
    """The import-time identity of a declared machine (its vendor, GPU model, compute
    capability and CUDA; not the count or memory): ``nvidia:NVIDIA B200:sm100:cuda12.9``."""
    if hw is None:
        return None
    return f"{hw.vendor}:{hw.gpu}:sm{hw.sm}:cuda{hw.cuda}"


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
                self._thread = threading.Thread(
                    target=self._loop, name="replay-pool-spawner", daemon=True
                )
                self._thread.start()
        fut: Future[Any] = Future()
        self._todo.put((fn, fut))
        return fut.result()

    def _loop(self) -> None:
        while True:
            fn, fut = self._todo.get()
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)


_SPAWNER = _Spawner()


class WarmWorker:
    """One sandboxed ``child/serve.py`` process. ``lock`` serialises its jobs; the start
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
        self._io = threading.RLock()  # held while reading; stop() closes the pipes under it

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
        self._starter = threading.Thread(target=self._start, name="replay-pool-start", daemon=True)
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
        except Exception as exc:
            log = log_tail(self.work / "worker.log") if self.work else ""
            self.failure = f"the warm replay worker did not start: {exc}"[:500] + (
                f"\n{log}" if log else ""
            )
            self.stop()
        finally:
            self._ready.set()

    def _spawn(self) -> None:
        tree, home = Path(self.key.tree), Path(self.key.home)
        (home / "replay-models").mkdir(parents=True, exist_ok=True)  # bound before it has models
        self.work = Path(tempfile.mkdtemp(prefix="sglang-replay-pool-"))
        (self.work / "jobs").mkdir()
        (self.work / "jobs").chmod(0o755)  # job folders are the parent's to create
        force, fallback = stub_plan(self.hw)
        cfg = {
            "release_root": str(tree),
            "stub_dirs": [str(d) for d in STUB_DIRS],
            "force_stubs": force,
            "fallback_stubs": fallback,
            "hardware": hardware_payload(self.hw),
            "probes": probe_values(self.hw),
            "forced_failure": None,
            "log_path": str(self.work / "worker.log"),
            "job_timeout_s": 120,
        }
        (self.work / "config.json").write_text(json.dumps(cfg))
        (self.work / "config.json").chmod(0o644)
        (self.work / "worker.log").touch()  # the worker appends to it as the sandbox user
        sandbox.prepare_workdir(self.work)
        if sandbox.privileged():  # the worker may not plant job folders (or links) there
            os.chown(self.work / "jobs", 0, 0)
        cmd = sandbox.command(
            [sys.executable, "-s", str(CHILD_SERVE), str(self.work / "config.json")],
            workdir=self.work,
            hidden=[home],
            readable=[HARNESS_DIR, tree, home / "replay-models"],
            limits=sandbox.Limits(cpu_s=WORKER_CPU_S),
        )
        env = child_env(self.work, tree, self.hw, None)
        with open(self.work / "worker.log", "ab") as early:  # before the child redirects
            self.proc = _SPAWNER.call(
                lambda: subprocess.Popen(
                    cmd,
                    cwd=self.work,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=early,
                    start_new_session=True,
                )
            )
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
            # A reader on another thread (a start being retired) sees ``self.proc`` change
            # within a second and lets go; only then are its descriptors freed, so their
            # numbers cannot be reused by the next worker's pipes while it still reads them.
            with self._io:
                for stream in (proc.stdin, proc.stdout):
                    with contextlib.suppress(Exception):
                        stream.close()  # type: ignore[union-attr]
        work, self.work = self.work, None
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)

    # ---------------------------------------------------------------- protocol

    def _read_line(self, deadline: float) -> str:
        with self._io:
            return self._read_line_held(deadline)

    def _read_line_held(self, deadline: float) -> str:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)  # a read never outlives the deadline
        while b"\n" not in self._buf:
            if self.proc is not proc:
                raise EOFError("the worker was stopped")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError(f"the worker exited ({proc.poll()})")
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
        job_dir = self.work / "jobs" / str(job_id)  # this job's own folder, removed after
        job_dir.mkdir()
        log_path = job_dir / "log.txt"
        msg: dict[str, Any] = {
            "id": job_id,
            "argv": list(job.argv),
            "timeout_s": job.timeout_s,
            "workdir": str(job_dir),
            "log_path": str(log_path),
            "allowed_paths": generated_paths(list(job.argv), Path(self.key.home)),
            "env": dict(job.env),
        }
        if job.hw is not None:
            msg["hardware"] = hardware_payload(job.hw)
            msg["probes"] = probe_values(job.hw)
        if job.payload is not None:
            target = job_dir / "payload.py"
            target.write_bytes(Path(job.payload).read_bytes())
            msg["payload"] = str(target)
        sandbox.prepare_workdir(job_dir)
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
            line = self._read_line(time.monotonic() + job.timeout_s + ANSWER_MARGIN_S)
            answer = json.loads(line)
            if (
                not isinstance(answer, dict)
                or answer.get("id") != job_id
                or not isinstance(answer.get("result"), dict)
            ):
                raise ValueError(f"not the answer to job {job_id}: {line[:200]!r}")
            raw: dict[str, Any] = answer["result"]
        except TimeoutError:
            raw = {
                "status": "harness_error",
                "phase": "timeout",
                "harness_reason": f"the warm replay worker did not answer within "
                f"{job.timeout_s + ANSWER_MARGIN_S:.0f}s (worker killed)",
            }
            self.stop()
        except (OSError, EOFError, ValueError) as exc:
            raw = {
                "status": "harness_error",
                "phase": "crash",
                "harness_reason": f"the warm replay worker failed ({type(exc).__name__}: {exc}; "
                f"worker killed)"[:600],
            }
            self.stop()
        raw["log_tail"] = log_tail(log_path)
        shutil.rmtree(job_dir, ignore_errors=True)
        if raw.get("leftover_processes"):  # the job's code outlived it: never reuse this worker
            raw["worker_retired"] = True
            self.stop()
        raw.setdefault("timings", {})["roundtrip_s"] = time.perf_counter() - t0
        self.jobs += 1
        self.last_used = time.monotonic()
        return raw

    def stats(self) -> dict[str, Any]:
        tree = Path(self.key.tree)
        return {
            "release": tree.name,
            "tree": str(tree),
            "machine": self.key.hardware,
            "vendor": self.hw.vendor if self.hw else None,
            "started_with": self.hw.name if self.hw else None,
            "alive": self.alive(),
            "pid": self.proc.pid if self.proc else None,
            "start_s": self.start_s,
            "starts": self.starts,
            "jobs": self.jobs,
            "busy": self.users > 0,
            "idle_s": round(time.monotonic() - self.last_used, 1),
            "rss_mib": _rss_mib(self.proc.pid) if self.alive() and self.proc else 0.0,
        }
