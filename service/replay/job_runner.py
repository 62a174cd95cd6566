"""The durable replay job runner: takes jobs (:mod:`service.replay.jobs`) and replays them.

``sglang-triage replay-worker`` runs :meth:`Worker.run`. Each job is run the way
the in-process path runs it (:func:`service.replay.background.schedule`): the
release is fetched, :func:`~service.replay.harness.replay_many` replays the
user's command and every fix in the sandbox within the job's budget, and
:func:`~service.replay.background.summarise` folds the results into every
triage waiting on the job, which is then stored again — the same verdicts, in the
same record, as without a worker. While it runs, a thread renews the job's
lease; a worker that dies leaves the job to be claimed again when the lease runs out.

When replay cannot run on this host (no sandbox, no wheel) the triages say so
(*unavailable*); a harness failure is *unverified*, never SGLang's verdict; a
job given up after too many lost workers is *unverified* too.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from kb.records import Records
from kb.settings import KBSettings
from service.replay.background import release_root, summarise, unavailable_reason
from service.replay.jobs import Job, JobQueue
from service.replay.results import ReplayResult

__all__ = ["TEST_PAYLOAD_ENV", "Worker", "run_spec"]

log = logging.getLogger("sglang_triage.replay.worker")

#: tests only: a script every replay of this worker runs in the sandbox first (see
#: ``replay_many(test_payload=...)``); read by the CLI, never reachable from a request
TEST_PAYLOAD_ENV = "TRIAGE_REPLAY_TEST_PAYLOAD"


def run_spec(
    settings: KBSettings, spec: dict[str, Any], test_payload: Path | None = None
) -> list[ReplayResult] | dict[str, str]:
    """Replay a job's ``spec``: the results, or the ``replay`` verdict when it cannot run."""
    from service.replay.harness import replay_many

    release, argvs = spec["release"], spec["argvs"]
    why = unavailable_reason(settings, release, argvs[0] if argvs else [])
    if why is not None:
        return {"status": "unavailable", "detail": why}
    return replay_many(
        release_root(settings, release),
        release,
        argvs,
        hardware=spec.get("hardware"),
        model_arch=spec.get("model_arch"),
        timeout_s=float(spec.get("budget_s") or 180.0),
        settings=settings,
        test_payload=test_payload,
    )


class Worker:
    """Claims jobs from ``queue`` and writes their verdicts into ``records``."""

    def __init__(
        self,
        records: Records,
        queue: JobQueue,
        settings: KBSettings,
        *,
        name: str | None = None,
        test_payload: Path | None = None,
    ) -> None:
        self.records, self.queue, self.settings = records, queue, settings
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.test_payload = test_payload

    def run(
        self, *, once: bool = False, poll_s: float = 2.0, stop: threading.Event | None = None
    ) -> int:
        """Process jobs until ``stop`` is set (or, with ``once``, at most one job); waits
        ``poll_s`` seconds between looks at an empty queue. Returns the jobs processed."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set():
            if self.run_once():
                done += 1
                if once:
                    break
            elif once:
                break
            else:
                stop.wait(poll_s)
        return done

    def run_once(self) -> bool:
        """Claim and process one job; False when the queue had none."""
        job = self.queue.claim(self.name)
        if job is None:
            return False
        log.info("job %s (%s) claimed, attempt %s", job.id, job.key[:12], job.attempts)
        if job.exhausted:
            self._deliver(
                job,
                {
                    "status": "unverified",
                    "detail": "replay did not finish: its "
                    f"worker was lost {job.attempts - 1} times",
                },
                "gave up",
            )
            return True
        stop = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat, args=(job, stop), daemon=True, name=f"lease-{job.id}"
        )
        beat.start()
        try:
            outcome: list[ReplayResult] | dict[str, str] = run_spec(
                self.settings, job.spec, self.test_payload
            )
            error = outcome.get("detail") if isinstance(outcome, dict) else None
        except Exception as exc:
            log.warning("replay of job %s failed: %s", job.id, exc)
            outcome = {"status": "unverified", "detail": f"replay failed: {exc}"}
            error = outcome["detail"]
        finally:
            stop.set()
            beat.join()
        self._deliver(job, outcome, error)
        return True

    def _heartbeat(self, job: Job, stop: threading.Event) -> None:
        while not stop.wait(max(0.5, self.queue.lease_s / 3)):
            try:
                if not self.queue.renew(job):
                    log.warning("job %s is no longer ours (lease lost)", job.id)
                    return
            except Exception as exc:
                log.warning("renewing the lease of job %s failed: %s", job.id, exc)

    def _deliver(
        self, job: Job, outcome: list[ReplayResult] | dict[str, str], error: str | None
    ) -> None:
        """Write the verdicts into every waiting triage, then finish the job (again when
        more triages joined meanwhile)."""
        while True:
            tids = self.queue.waiting(job)
            if not tids and self.queue.finish(job, error=error):
                return
            for tid in tids:
                self._write(tid, job.spec, outcome)
            self.queue.settle(job, tids)
            if not tids:
                time.sleep(0.05)

    def _write(
        self, tid: str, spec: dict[str, Any], outcome: list[ReplayResult] | dict[str, str]
    ) -> None:
        rec = self.records.get(tid)
        if rec is None or not isinstance(rec.get("result"), dict):
            return  # purged, or damaged: nothing to update
        result = rec["result"]
        if isinstance(outcome, dict):
            result["replay"] = dict(outcome)
        else:
            result = summarise(outcome, result, spec["release"], spec.get("hardware"))
        self.records.save(tid, rec.get("request") or {}, result)
