"""``sglang-triage replay-worker``: run durable replay jobs from the records database.

Start one or more on any host that reaches ``TRIAGE_DATABASE_URL`` and has the
replay sandbox (bubblewrap) and the wheel cache; the API then only queues jobs
(see :mod:`service.replay.jobs` and :mod:`service.replay.job_runner`). Registered on
the main CLI by :func:`register`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

__all__ = ["register", "replay_worker"]

console = Console(stderr=True)


def replay_worker(
    once: Annotated[
        bool, typer.Option("--once", help="Process at most one job, then exit.")
    ] = False,
    poll: Annotated[
        float, typer.Option("--poll", min=0.05, help="Seconds between looks at an empty queue.")
    ] = 2.0,
) -> None:
    """Replay queued triages (TRIAGE_DATABASE_URL, or TRIAGE_REPLAY_QUEUE=database) and store
    the verdicts in the triage records, as the API's in-process replay does."""
    from service.replay.job_runner import TEST_PAYLOAD_ENV, Worker
    from service.settings import Settings
    from service.wiring import records_for

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    if settings.replay_queue == "process" or (
        settings.replay_queue == "auto" and not settings.database_url
    ):
        console.print(
            "[yellow]note:[/yellow] the API replays in-process with these settings "
            "(set TRIAGE_DATABASE_URL or TRIAGE_REPLAY_QUEUE=database); "
            "serving the records' queue anyway"
        )
    from service.replay.jobs import JobQueue

    records = records_for(settings)
    queue = JobQueue(records.engine, lease_s=settings.replay_lease_s)
    payload = os.environ.get(TEST_PAYLOAD_ENV)
    worker = Worker(records, queue, settings, test_payload=Path(payload) if payload else None)
    stop = threading.Event()

    def _stop(*_: Any) -> None:  # finish the job at hand, then leave
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    console.print(f"replay worker {worker.name} on revision {records.revision()}")
    done = worker.run(once=once, poll_s=poll, stop=stop)
    console.print(f"{done} job(s) processed")


def register(app: typer.Typer) -> None:
    """Add ``replay-worker`` to ``app``."""
    app.command(name="replay-worker")(replay_worker)
