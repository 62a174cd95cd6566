"""What one ingest did: the :class:`IngestReport` both stages fill, and the progress callback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IngestReport", "Progress"]

#: ``progress(stage, done, total)``: ``stage`` is ``"parse"`` or ``"embed"``.
Progress = Callable[[str, int, int], None]


@dataclass
class IngestReport:
    version: str
    origin: str
    structure: str  # "indexed" | "unchanged"
    files: int = 0
    functions: int = 0
    chunks: int = 0
    checks: int = 0
    refs: int = 0
    flags: int = 0
    registrations: int = 0
    parse_errors: dict[str, list[int]] = field(default_factory=dict)
    parsed: int = 0  # files parsed now
    reused_files: int = 0  # files whose stored analysis (same path, bytes and code) was linked
    embedded: int = 0  # chunks whose vectors were computed now
    reused: int = 0  # chunks whose vectors came from the cache
    upserted: int = 0
    scope: str = "none"
    timings: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
