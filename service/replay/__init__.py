"""Verify by replay: run an SGLang release's own argument validation on this CPU-only machine.

See :mod:`service.replay.harness` (``replay``, ``replay_many``), :mod:`service.replay.pool`
(the warm workers ``replay_many`` uses), :mod:`service.replay.child` (what runs inside the
sandbox), :mod:`service.replay.probes` (``replay_startup``: past validation, into the
located check's own code), :mod:`service.replay.fix_search` (the replay-backed fix search),
:mod:`service.replay.jobs` and :mod:`service.replay.job_runner` (durable jobs and their
runner), :mod:`service.replay.settings` (``ReplaySettings``) and ``README.md`` in this
folder for what replay can and cannot reach.
"""

from __future__ import annotations

from service.replay.harness import prewarm, replay, replay_async, replay_many
from service.replay.pool import WarmPool, default_pool
from service.replay.probes import StartupProbe, probe_for_location, replay_startup
from service.replay.results import Frame, ReplayResult

__all__ = [
    "Frame",
    "ReplayResult",
    "StartupProbe",
    "WarmPool",
    "default_pool",
    "prewarm",
    "probe_for_location",
    "replay",
    "replay_async",
    "replay_many",
    "replay_startup",
]
