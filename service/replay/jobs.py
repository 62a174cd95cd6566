"""Durable replay jobs in the records database, for ``sglang-triage replay-worker``.

With ``TRIAGE_DATABASE_URL`` set (or ``TRIAGE_REPLAY_QUEUE=database``) the API does
not replay in its own process: it stores a job (table ``replay_jobs``) and any
number of worker processes, on any host that reaches the database, run it
(:mod:`service.replay.job_runner`).

* **One job per replay.** Jobs are keyed by the harness's batch cache key
  (:func:`~service.replay.harness.batch_key`): the same command line, fixes,
  release and machine posted twice, by anyone, is one job; every triage waiting on
  it is listed in ``replay_job_triages`` and gets the verdicts.
* **Claiming** takes the next job in one transaction: ``SELECT … FOR UPDATE SKIP
  LOCKED`` on PostgreSQL (workers never wait on each other's rows and never take
  the same job), ``BEGIN IMMEDIATE`` on SQLite (one writer at a time).
* **A lease.** A claimed job belongs to its worker until ``lease_until``; the worker
  renews it while the replay runs. A worker that is killed stops renewing, and the
  job is claimed again by the next worker once the lease runs out. After
  ``max_attempts`` claims the job is given up: its triages are told so
  (*unverified*), never left pending.
* **Bounded and fair**, as the in-process queue: at most ``max_pending`` jobs wait,
  at most ``per_client`` from one client, and a job's ``rank`` (how many of its
  client's jobs were ahead of it) orders the queue before its age, so one client
  posting many logs does not starve the others.

Times are wall-clock seconds (``time.time``) of the processes, which share the
database but no monotonic clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from kb import records_db as db
from service.replay.harness import batch_key
from service.replay.queue import QueueFull

__all__ = ["Job", "JobQueue"]

_WAITING = ("queued", "running")


@dataclass
class Job:
    """A claimed job: what to replay (``spec``) and how often it was claimed."""

    id: int
    key: str
    spec: dict[str, Any]
    attempts: int
    worker: str
    #: claimed more than ``max_attempts`` times: give it up instead of running it
    exhausted: bool = False


class JobQueue:
    """The ``replay_jobs`` table of ``engine`` (see the module doc)."""

    def __init__(
        self,
        engine: Engine,
        *,
        lease_s: float = 60.0,
        max_pending: int = 64,
        per_client: int = 8,
        max_attempts: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine, self.lease_s, self.clock = engine, lease_s, clock
        self.max_pending, self.per_client, self.max_attempts = max_pending, per_client, max_attempts

    # -- the API's side ---------------------------------------------------------------
    @staticmethod
    def unavailable_reason(release: str | None, argv: list[str]) -> str | None:
        """Why a triage cannot be queued (None when it can). Whether replay can run at
        all (the sandbox, the wheel) is the worker's to say: it may run on another host."""
        if not release or not argv:
            return "replay needs the release and the launch command"
        return None

    def enqueue_triage(
        self,
        tid: str,
        result: dict[str, Any],
        argv: list[str],
        hardware: str | None,
        model_arch: str | None,
        *,
        client: str = "local",
        budget_s: float = 180.0,
    ) -> int | None:
        """Queue the replay of triage ``tid`` (its command and every fix); the job's id, or
        None when it cannot be replayed. Raises :class:`QueueFull` over a bound."""
        release = (result.get("release") or {}).get("release")
        if self.unavailable_reason(release, argv) is not None:
            return None
        argvs = [list(argv)] + [list(f.get("argv") or []) for f in result.get("fixes", [])]
        key = batch_key(release, argvs, hardware=hardware, model_arch=model_arch)
        spec = {
            "release": release,
            "argvs": argvs,
            "hardware": hardware,
            "model_arch": model_arch,
            "budget_s": budget_s,
        }
        return self.submit(key, spec, tid, client)

    def submit(self, key: str, spec: dict[str, Any], tid: str, client: str = "local") -> int:
        """Add triage ``tid`` to the job ``key``, creating (or re-queueing a finished) one."""
        for _ in range(3):
            try:
                return self._submit(key, spec, tid, client)
            except sa.exc.IntegrityError:  # another process created the same job just now
                continue
        return self._submit(key, spec, tid, client)

    def _submit(self, key: str, spec: dict[str, Any], tid: str, client: str) -> int:
        t, w = db.replay_jobs, db.replay_job_triages
        with db.write_tx(self.engine) as conn:
            row = self._locked(conn, key)
            if row is None or row.state not in _WAITING:
                self._check_bounds(conn, client)
                rank = conn.execute(
                    sa.select(sa.func.count())
                    .select_from(t)
                    .where(t.c.client == client, t.c.state.in_(_WAITING))
                ).scalar_one()
                fresh = {
                    "client": client,
                    "rank": rank,
                    "state": "queued",
                    "spec": json.dumps(spec),
                    "attempts": 0,
                    "worker": None,
                    "created": self.clock(),
                    "claimed_at": None,
                    "lease_until": None,
                    "finished": None,
                    "error": None,
                }
                if row is None:
                    conn.execute(t.insert().values(key=key, **fresh))
                else:  # finished before: replay again (the worker's disk cache may answer)
                    conn.execute(t.update().where(t.c.key == key).values(**fresh))
                row = self._locked(conn, key)
            conn.execute(w.delete().where(w.c.key == key, w.c.tid == tid))
            conn.execute(w.insert().values(key=key, tid=tid))
            return int(row.id)

    def _locked(self, conn: Connection, key: str) -> Any:
        t = db.replay_jobs
        return conn.execute(
            sa.select(t.c.id, t.c.state).where(t.c.key == key).with_for_update()
        ).first()

    def _check_bounds(self, conn: Connection, client: str) -> None:
        t = db.replay_jobs
        queued = conn.execute(
            sa.select(t.c.client, sa.func.count()).where(t.c.state == "queued").group_by(t.c.client)
        ).all()
        if sum(n for _, n in queued) >= self.max_pending:
            raise QueueFull(f"replay queue full ({self.max_pending} jobs waiting)")
        if dict(queued).get(client, 0) >= self.per_client:
            raise QueueFull(f"replay queue full for this client ({self.per_client} waiting)")

    def depth(self) -> int:
        """Jobs waiting for a worker (not counting those running)."""
        t = db.replay_jobs
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).select_from(t).where(t.c.state == "queued")
                ).scalar_one()
            )

    def jobs(self) -> list[dict[str, Any]]:
        """Every job row, oldest first (for operators and tests)."""
        t = db.replay_jobs
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(t).order_by(t.c.id)).mappings()]

    # -- the worker's side ------------------------------------------------------------
    def claim(self, worker: str) -> Job | None:
        """The next job for ``worker`` (queued, or running with its lease run out), marked
        running under a fresh lease; None when there is none."""
        t = db.replay_jobs
        now = self.clock()
        with db.write_tx(self.engine) as conn:
            row = conn.execute(
                sa.select(t.c.id, t.c.key, t.c.spec, t.c.attempts)
                .where(
                    sa.or_(
                        t.c.state == "queued",
                        sa.and_(t.c.state == "running", t.c.lease_until < now),
                    )
                )
                .order_by(t.c.rank, t.c.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            ).first()
            if row is None:
                return None
            attempts = row.attempts + 1
            conn.execute(
                t.update()
                .where(t.c.id == row.id)
                .values(
                    state="running",
                    worker=worker,
                    attempts=attempts,
                    claimed_at=now,
                    lease_until=now + self.lease_s,
                )
            )
        return Job(
            id=row.id,
            key=row.key,
            spec=json.loads(row.spec),
            attempts=attempts,
            worker=worker,
            exhausted=attempts > self.max_attempts,
        )

    def renew(self, job: Job) -> bool:
        """Extend ``job``'s lease; False when it is no longer this worker's."""
        t = db.replay_jobs
        with self.engine.begin() as conn:
            return (
                conn.execute(
                    t.update()
                    .where(
                        t.c.id == job.id,
                        t.c.worker == job.worker,
                        t.c.state == "running",
                    )
                    .values(lease_until=self.clock() + self.lease_s)
                ).rowcount
                == 1
            )

    def waiting(self, job: Job) -> list[str]:
        """The triages still waiting for ``job``'s verdicts."""
        w = db.replay_job_triages
        with self.engine.connect() as conn:
            return [
                r[0]
                for r in conn.execute(
                    sa.select(w.c.tid).where(w.c.key == job.key).order_by(w.c.tid)
                )
            ]

    def settle(self, job: Job, tids: list[str]) -> None:
        """``tids`` got their verdicts: they wait no more."""
        w = db.replay_job_triages
        with self.engine.begin() as conn:
            conn.execute(w.delete().where(w.c.key == job.key, w.c.tid.in_(tids)))

    def finish(self, job: Job, *, error: str | None = None) -> bool:
        """Mark ``job`` done (``failed`` with an ``error``) unless a triage was added since
        :meth:`waiting` (False: settle those first, then finish again). True as well when
        the job is no longer this worker's (its new owner finishes it)."""
        t, w = db.replay_jobs, db.replay_job_triages
        with db.write_tx(self.engine) as conn:
            row = conn.execute(
                sa.select(t.c.worker, t.c.state).where(t.c.id == job.id).with_for_update()
            ).first()
            if row is None or row.worker != job.worker or row.state != "running":
                return True
            if conn.execute(sa.select(w.c.tid).where(w.c.key == job.key).limit(1)).first():
                return False
            conn.execute(
                t.update()
                .where(t.c.id == job.id)
                .values(
                    state="failed" if error else "done",
                    finished=self.clock(),
                    error=error,
                    lease_until=None,
                )
            )
        return True
