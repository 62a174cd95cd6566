"""Former name of :mod:`service.replay.job_runner` (the durable replay job runner).

Kept only so that ``service/cli/worker.py`` (edited elsewhere at the time of the move)
still imports; new code imports :mod:`service.replay.job_runner`. Remove this module once
no caller names it.
"""

from __future__ import annotations

from service.replay.job_runner import TEST_PAYLOAD_ENV, Worker, run_spec

__all__ = ["TEST_PAYLOAD_ENV", "Worker", "run_spec"]
