"""The worker side of on-demand ingest: one release at a time, in a child process.

:class:`OnDemandIngest` decides, under one lock, whether a release may be fetched (listed by
the index, not failed lately, within the hourly budgets, room in the queue) and queues it;
one worker thread makes room under the disk quota and runs ``sglang-triage ingest
--release X`` as a child process with the KB's settings (:func:`child_env`), then tells the
answers waiting for it (:mod:`service.ondemand` re-triages them).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kb.knowledge import KnowledgeBase
from kb.settings import KBSettings
from service.engine import OnDemandNote
from service.settings import Settings

__all__ = [
    "FAILED_MAX",
    "MAX_QUEUED",
    "MAX_WAITERS",
    "NEEDS_INGEST_EXTRA",
    "RETRY_AFTER_S",
    "OnDemandIngest",
    "OnDemandNote",
    "child_env",
]

log = logging.getLogger(__name__)

#: A release that could not be fetched is not tried again for this long.
RETRY_AFTER_S = 600.0
#: The failure memory holds at most this many versions.
FAILED_MAX = 256
#: Releases that may wait behind the one being ingested.
MAX_QUEUED = 4
#: Answers updated when their ingest lands, over all ingests (each holds its log until
#: then); later ones are told to triage again.
MAX_WAITERS = 64
_HOUR_S = 3600.0
#: What to install where :mod:`ingest`'s dependencies (tree-sitter, ...) are missing.
NEEDS_INGEST_EXTRA = (
    "on-demand ingest needs the [ingest] extra (pip install 'sglang-triage[ingest]')"
)


def _missing_ingest() -> str | None:
    """Why :mod:`ingest` cannot be imported in this install (None when it can)."""
    try:
        import ingest.acquire
        import ingest.pipeline  # noqa: F401
    except ImportError as exc:
        return f"{NEEDS_INGEST_EXTRA}: {exc.name or exc} is not installed"
    return None


def _can_embed() -> bool:
    """Whether this install can compute embeddings (sentence-transformers, the [ingest] extra)."""
    return importlib.util.find_spec("sentence_transformers") is not None


def child_env(settings: KBSettings) -> dict[str, str]:
    """The environment of an on-demand ingest's child process: this process's, without any
    ``TRIAGE_*`` variable (no secret reaches it), plus the KB's settings as ``TRIAGE_*``
    (so the child writes into the very KB and caches ``settings`` name)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
    for name in KBSettings.model_fields:
        value = getattr(settings, name)
        if value is not None:
            env[f"TRIAGE_{name.upper()}"] = (
                json.dumps(value) if isinstance(value, list) else str(value)
            )
    env["HF_HUB_OFFLINE"] = "1"
    env["COLUMNS"] = "1000"  # the CLI's console would wrap its error line at 80
    return env


def _child_error(stderr: str) -> str:
    """The reason a failed ``sglang-triage ingest`` gave (its ``error:`` line, else its tail)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    at = max((i for i, line in enumerate(lines) if "error:" in line), default=None)
    text = (
        " ".join(lines[at:]).split("error:", 1)[1].strip()
        if at is not None
        else " / ".join(lines[-3:])
    )
    return (text or "the ingest process failed without a message")[:600]


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` and every process it started (its own session)."""
    with contextlib.suppress(OSError):  # gone already
        os.killpg(proc.pid, signal.SIGKILL)


@dataclass
class _Job:
    """One release to ingest, and the answers waiting for it to land."""

    version: str
    settings: Settings
    client: str
    waiters: list[Callable[[OnDemandNote], None]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    note: OnDemandNote | None = None


class OnDemandIngest:
    """Has missing releases of one KB indexed for the front ends, one at a time, within bounds.

    It holds what must be shared per KB (the lock, the queue and its worker thread, the
    failure memory, the hourly budgets, the release lists); the settings are each
    caller's, so a front end with on-demand ingest off never ingests through an instance
    another front end made. :attr:`fetches` counts the ingests started (child processes).
    """

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self._lock = threading.Lock()
        self._failed: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._jobs: OrderedDict[str, _Job] = OrderedDict()  # waiting or running, oldest first
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._started: deque[tuple[float, str]] = deque()  # (monotonic, client), last hour
        self._used: dict[str, float] = {}  # release ingested here -> when it last answered
        self._child: subprocess.Popen[str] | None = None
        self.fetches = 0
        atexit.register(self._stop_child)

    # -- the request side ----------------------------------------------------------------
    def ensure(
        self,
        version: str,
        settings: Settings,
        *,
        client: str = "local",
        on_landed: Callable[[OnDemandNote], None] | None = None,
        wait: bool = False,
    ) -> OnDemandNote:
        """Whether ``version`` is (or is being) indexed, or why not; never waits for pip
        unless ``wait``. ``on_landed(note)`` is called (on the worker thread) when an
        ingest this call started or joined ends, whichever way."""
        how = f"sglang-triage ingest --release {version}"
        if not settings.on_demand_ingest:
            return OnDemandNote(
                release=version,
                status="disabled",
                how=how,
                detail="on-demand ingest is off (TRIAGE_ON_DEMAND_INGEST)",
            )
        missing = _missing_ingest()
        if missing:
            return OnDemandNote(release=version, status="disabled", how=how, detail=missing)
        not_offered = self._not_offered(version, settings)
        if not_offered:
            return OnDemandNote(release=version, status="unavailable", how=how, detail=not_offered)
        with self._lock:  # everything that decides whether pip runs, under one lock
            rel = self.kb.store.release(version)
            if rel is not None and rel["status"] in ("indexed", "complete"):  # done meanwhile
                return OnDemandNote(
                    release=version,
                    status="ingested",
                    seconds=0.0,
                    how=how,
                    detail="indexed by another request just before this one",
                )
            failed = self._failure(version)
            if failed:
                return OnDemandNote(release=version, status="unavailable", how=how, detail=failed)
            job = self._jobs.get(version)
            if job is None:
                refused = self._over_budget(client, settings)
                if refused:
                    return OnDemandNote(release=version, status="refused", how=how, detail=refused)
                job = self._jobs[version] = _Job(version, settings, client)
                self._started.append((time.monotonic(), client))
                self._queue.put(job)
                if self._worker is None or not self._worker.is_alive():
                    self._worker = threading.Thread(
                        target=self._work, daemon=True, name="on-demand-ingest"
                    )
                    self._worker.start()
            ahead = list(self._jobs).index(version)
            waiting = sum(len(j.waiters) for j in self._jobs.values())
            follows = on_landed is not None and waiting < MAX_WAITERS
            if follows:
                job.waiters.append(on_landed)  # type: ignore[arg-type]
        if wait:
            job.done.wait()
            assert job.note is not None
            return job.note
        queued = f" ({ahead} release(s) ahead of it)" if ahead else ""
        then = (
            "this answer will update when it lands"
            if follows
            else "triage the log again once it landed"
            if on_landed is None
            else "too many answers wait for it: triage the log again once it landed"
        )
        return OnDemandNote(
            release=version,
            status="ingesting",
            how=how,
            detail=f"ingesting {version} in the background{queued}; {then}",
        )

    def touch(self, version: str | None) -> None:
        """An answer came from ``version``: it was used now (the quota evicts the least
        recently used on-demand release; only releases ingested by this process are tracked,
        others count from the time they landed)."""
        if version and version in self._used:
            self._used[version] = time.time()

    def _not_offered(self, version: str, settings: Settings) -> str | None:
        """Why ``version`` must not be fetched (:func:`ingest.acquire.release_list.not_offered`)."""
        from ingest.acquire.release_list import not_offered, release_list_for

        releases = release_list_for(
            settings.pip_index_url,
            ttl_s=settings.release_list_ttl_s,
            cache_file=settings.home / "index" / "releases.json",
        )
        return not_offered(version, releases, git_url=settings.sglang_git)

    def _failure(self, version: str) -> str | None:
        """Why ``version`` failed within :data:`RETRY_AFTER_S` (caller holds the lock)."""
        failed = self._failed.get(version)
        if failed is None:
            return None
        if time.monotonic() - failed[0] >= RETRY_AFTER_S:
            del self._failed[version]
            return None
        return failed[1]

    def _remember_failure(self, version: str, detail: str) -> None:
        """Remember that ``version`` failed (caller holds the lock); at most
        :data:`FAILED_MAX` versions, the least recently failed dropped first."""
        self._failed[version] = (time.monotonic(), detail)
        self._failed.move_to_end(version)
        while len(self._failed) > FAILED_MAX:
            self._failed.popitem(last=False)

    def _over_budget(self, client: str, settings: Settings) -> str | None:
        """Why a new ingest for ``client`` must wait (caller holds the lock), else None."""
        now = time.monotonic()
        while self._started and now - self._started[0][0] >= _HOUR_S:
            self._started.popleft()
        if len(self._started) >= settings.on_demand_global_per_hour:
            return (
                f"{len(self._started)} releases were ingested on demand in the last hour, "
                "the service's limit (TRIAGE_ON_DEMAND_GLOBAL_PER_HOUR): not ingested now"
            )
        mine = sum(1 for _, who in self._started if who == client)
        if mine >= settings.on_demand_per_client_per_hour:
            return (
                f"this client had {mine} new releases ingested on demand in the last hour, "
                "its limit (TRIAGE_ON_DEMAND_PER_CLIENT_PER_HOUR): not ingested now"
            )
        if len(self._jobs) > MAX_QUEUED:
            return f"{len(self._jobs)} releases are being ingested or waiting: try again later"
        return None

    # -- the worker side -------------------------------------------------------------------
    def _work(self) -> None:
        """The worker thread: one job at a time; ends after a minute without work."""
        while True:
            try:
                job = self._queue.get(timeout=60)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._worker = None
                        return
                continue
            try:
                note = self._run(job)
            except Exception as exc:  # a bug must not leave the answers waiting forever
                log.exception("on-demand ingest of %s failed", job.version)
                note = OnDemandNote(
                    release=job.version,
                    status="unavailable",
                    how=f"sglang-triage ingest --release {job.version}",
                    detail=f"the ingest failed unexpectedly: {type(exc).__name__}",
                )
            with self._lock:
                job.note = note
                self._jobs.pop(job.version, None)
                if note.status == "unavailable":
                    self._remember_failure(job.version, note.detail)
                waiters = list(job.waiters)
            job.done.set()
            for landed in waiters:
                try:
                    landed(note)
                except Exception:  # one answer's update must not stop the others'
                    log.exception("updating an answer after the ingest of %s", job.version)

    def _run(self, job: _Job) -> OnDemandNote:
        """Under the KB's lock (other API processes of the KB wait), unless another process
        indexed it meanwhile: :meth:`_ingest`."""
        from ingest.acquire.quota import one_ingest_at_a_time

        with one_ingest_at_a_time(self.kb):
            rel = self.kb.store.release(job.version)
            if rel is not None and rel["status"] in ("indexed", "complete"):
                return OnDemandNote(
                    release=job.version,
                    status="ingested",
                    seconds=0.0,
                    how=f"sglang-triage ingest --release {job.version}",
                    detail="indexed by another process of the service",
                )
            return self._ingest(job)

    def _ingest(self, job: _Job) -> OnDemandNote:
        """Make room under the quota, then ``sglang-triage ingest --release X`` as a child."""
        from ingest.acquire.quota import make_room, record_on_demand

        v, settings = job.version, job.settings
        how = f"sglang-triage ingest --release {v}"
        t0 = time.perf_counter()
        evicted = ""
        if settings.disk_quota_gb > 0:
            quota = int(settings.disk_quota_gb * 1e9)
            room = make_room(self.kb, settings, quota, keep={v}, last_used=dict(self._used))
            for gone in room.evicted:
                self._used.pop(gone, None)
            if room.evicted:
                evicted = f"; to stay under the disk quota, evicted {', '.join(room.evicted)}"
            if not room.ok:
                return OnDemandNote(
                    release=v,
                    status="refused",
                    how=how,
                    detail=f"the KB and caches hold {room.after / 1e9:.3f} GB, at or over the "
                    f"disk quota of {settings.disk_quota_gb} GB (TRIAGE_DISK_QUOTA_GB)"
                    + (
                        evicted
                        or "; no on-demand release is left to evict (the default releases are kept)"
                    )
                    + ": not ingested",
                )
        embeds = settings.on_demand_embed and bool(settings.chroma_url) and _can_embed()
        cmd = [
            sys.executable,
            "-m",
            "service.cli.main",
            "ingest",
            "--release",
            v,
            "--scope",
            "default" if embeds else "none",
        ]
        self.fetches += 1
        log.info(
            "on-demand ingest of %s started in a child process",
            v,
            extra={"fields": {"release": v, "client": job.client}},
        )
        try:
            proc = subprocess.Popen(
                cmd,
                env=child_env(settings),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )  # its pip and parse workers too
        except OSError as exc:
            return OnDemandNote(
                release=v,
                status="unavailable",
                how=how,
                detail=f"could not start the ingest of {v}: {exc}",
            )
        self._child = proc
        try:
            _, err = proc.communicate(timeout=settings.on_demand_timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _, err = proc.communicate()
            err = (
                f"error: it took longer than {settings.on_demand_timeout_s:g} s "
                "(TRIAGE_ON_DEMAND_TIMEOUT_S) and was stopped"
            )
        finally:
            self._child = None
        seconds = round(time.perf_counter() - t0, 2)
        rel = self.kb.store.release(v)
        if rel is None or rel["status"] not in ("indexed", "complete"):
            return OnDemandNote(
                release=v,
                status="unavailable",
                how=how,
                detail=f"could not fetch or index {v}: {_child_error(err)}" + evicted,
            )
        record_on_demand(self.kb, v)
        self._used[v] = time.time()
        why_not = (
            "embedding failed: " + _child_error(err)
            if embeds
            else "TRIAGE_ON_DEMAND_EMBED is off"
            if not settings.on_demand_embed
            else "embedded Chroma belongs to the server process: set TRIAGE_CHROMA_URL"
            if not settings.chroma_url
            else "sentence-transformers is not installed: the [ingest] extra"
        )
        return OnDemandNote(
            release=v,
            status="ingested",
            seconds=seconds,
            how=how,
            detail=f"indexed on demand in {seconds:.1f} s by a separate process: {rel['files']} "
            "files; "
            + (
                "with embeddings"
                if embeds and proc.returncode == 0
                else f"no embeddings ({why_not}): search uses keywords"
            )
            + evicted,
        )

    def _stop_child(self) -> None:
        """At exit: stop a running ingest (it is started again by the next log naming it)."""
        child = self._child
        if child is not None and child.poll() is None:
            _kill_group(child)
