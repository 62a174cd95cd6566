"""The shipped incidents (``evals/incidents/*.jsonl``) and the eval suite's default set.

``seed.jsonl`` is the seed case, ``public.jsonl`` public issue reports
(converted), ``generated.jsonl`` what :mod:`evals.generate` wrote and replay
confirmed for the default releases (0.5.9, 0.5.11, 0.5.23), and
``generated_more.jsonl`` the same script's output, same seed, for three more
releases (0.5.5, 0.5.16, 0.5.21), kept in its own file so that the first one
stays byte-identical, and ``generated_old.jsonl`` for a 0.4.x release (0.4.10.post2). The record format itself is :mod:`kb.incidents` (including
``expected.equivalents``: the other ingested releases whose own validation, replayed,
produces exactly the same frameless crash log, see :mod:`evals.equivalents`); its names
are re-exported here for the eval suite's callers.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kb.incidents import (
    CATEGORIES,
    Category,
    Equivalent,
    Expected,
    ExpectedLocation,
    FixSpec,
    Incident,
    IncidentError,
    categorize,
    dump_incidents,
    parse_incidents,
    read_incidents,
)

INCIDENTS_DIR = Path(__file__).resolve().parent / "incidents"
SHIPPED = (
    "seed.jsonl",
    "public.jsonl",
    "generated.jsonl",
    "generated_more.jsonl",
    "generated_old.jsonl",
)


def shipped_paths() -> list[Path]:
    return [INCIDENTS_DIR / name for name in SHIPPED if (INCIDENTS_DIR / name).is_file()]


def load_incidents(paths: Iterable[str | Path] | None = None) -> list[Incident]:
    """Incidents from ``paths`` (files or folders of ``*.jsonl``); the shipped ones by default.

    Ids must be unique across everything loaded.
    """
    return read_incidents(shipped_paths() if paths is None else paths)


__all__ = [
    "CATEGORIES",
    "INCIDENTS_DIR",
    "SHIPPED",
    "Category",
    "Equivalent",
    "Expected",
    "ExpectedLocation",
    "FixSpec",
    "Incident",
    "IncidentError",
    "categorize",
    "dump_incidents",
    "load_incidents",
    "parse_incidents",
    "read_incidents",
    "shipped_paths",
]
