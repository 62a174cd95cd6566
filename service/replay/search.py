"""Former name of :mod:`service.replay.fix_search` (the replay-backed fix search).

Kept only so that ``service/usecase/triage.py`` (edited elsewhere at the time of the move)
still imports; new code imports :mod:`service.replay.fix_search`. Remove this module once
no caller names it.
"""

from __future__ import annotations

from service.replay.fix_search import (
    SKIPS_THE_CHECK,
    keeping_alternatives,
    needs_search,
    request_cost,
    rerank,
    search_fixes,
    skips_check,
)

__all__ = [
    "SKIPS_THE_CHECK",
    "keeping_alternatives",
    "needs_search",
    "request_cost",
    "rerank",
    "search_fixes",
    "skips_check",
]
