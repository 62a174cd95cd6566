"""Verify by replay: run an SGLang release's own argument validation on this CPU-only machine.

See :mod:`service.replay.harness` (``replay``, ``replay_many``) and
``README.md`` in this folder for what replay can and cannot reach.
"""

from __future__ import annotations

from service.replay.harness import replay, replay_async, replay_many
from service.replay.results import Frame, ReplayResult

__all__ = ["Frame", "ReplayResult", "replay", "replay_async", "replay_many"]
