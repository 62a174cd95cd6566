"""What replay reads from the environment: where it runs, the warm pool, the fix search.

:class:`ReplaySettings` extends :class:`kb.settings.KBSettings` (prefix ``TRIAGE_``, an
optional ``.env``; replay reads the cache home and the wheel cache from it) with replay's
own fields, under the names the service has always read (``TRIAGE_REPLAY_ENABLED``,
``TRIAGE_REPLAY_POOL``, ``TRIAGE_FIX_SEARCH_DEADLINE_S``...).
:class:`service.settings.Settings` extends it (with the engine's settings), so
``settings.replay_enabled`` and ``Settings(replay_enabled=False)`` read as before. Replay's
functions take any :class:`~kb.settings.KBSettings`; the fields here decide when a caller
passes these settings (:func:`service.replay.harness.pool_enabled`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kb.settings import KBSettings

__all__ = ["ReplaySettings"]


class ReplaySettings(KBSettings):
    """The KB's settings plus where replay runs, its warm pool and the fix search's bounds."""

    replay_queue: Literal["auto", "process", "database"] = Field(
        "auto",
        description="Where replay runs: 'process' (a thread of the API), 'database' "
        "(durable jobs for `sglang-triage replay-worker`); 'auto': 'database' when "
        "database_url is set.",
    )
    replay_lease_s: float = Field(
        60.0,
        description="A claimed replay job returns to the queue when its worker stops "
        "renewing the lease for this long (a killed worker).",
    )
    replay_enabled: bool = Field(True, description="Verify fixes by replay in the background.")
    replay_pool: bool = Field(
        True,
        description="Replay on warm workers that import each release once (two at most, "
        "stopped after 10 idle minutes); off: a fresh sandboxed subprocess per batch.",
    )
    fix_search_deadline_s: float = Field(
        4.0,
        ge=0,
        description="When static evaluation leaves the check or a fix undecided, "
        "replay the candidate fixes before answering, waiting at most this long (0: never; "
        "past it the answer is returned and replay goes on in the background).",
    )
    fix_search_verify_clean: bool = Field(
        True,
        description="Also replay a statically verified recommended fix before "
        "answering (one command line on a warm worker), and search the other candidates when "
        "SGLang refuses it; off: only undecided triages wait for replay.",
    )
    fix_search_candidates: int = Field(
        5,
        ge=1,
        le=20,
        description="At most this many candidate fixes are replayed by the fix search.",
    )
