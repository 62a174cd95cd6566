"""The shipped incidents (``evals/incidents/*.jsonl``) and the eval suite's default set.

``seed.jsonl`` is the seed case, ``public.jsonl`` public issue reports
(converted), ``generated.jsonl`` what :mod:`evals.generate` wrote and replay
confirmed for the default releases (0.5.9, 0.5.11, 0.5.23), and
``generated_more.jsonl`` the same script's output, same seed, for three more
releases (0.5.5, 0.5.16, 0.5.21), kept in its own file so that the first one
stays byte-identical. The record format itself is :mod:`kb.incidents`; its names are
re-exported here for the eval suite's callers, except :class:`Expected` and
:class:`Incident`, which the eval suite extends with ``expected.equivalents``: the
other ingested releases whose own validation, replayed, produces exactly the same
frameless crash log (see :mod:`evals.equivalents`). The field is written only when
non-empty, so records without it are byte-identical to :mod:`kb.incidents`' format.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from kb.incidents import (
    CATEGORIES,
    Category,
    ExpectedLocation,
    FixSpec,
    IncidentError,
    categorize,
    dump_incidents,
)
from kb.incidents import Expected as _KbExpected
from kb.incidents import Incident as _KbIncident

INCIDENTS_DIR = Path(__file__).resolve().parent / "incidents"
SHIPPED = ("seed.jsonl", "public.jsonl", "generated.jsonl", "generated_more.jsonl")


class Equivalent(BaseModel):
    """Another ingested release that reproduces the incident's crash log exactly, and the
    check (lines included) its own validation raised in when replayed."""

    model_config = ConfigDict(extra="forbid")

    release: str
    path: str
    function: str
    start_line: int
    end_line: int


class Expected(_KbExpected):
    """:class:`kb.incidents.Expected` plus ``equivalents`` (omitted from the JSON when empty)."""

    #: other releases that replay the same command into the same exception and message
    #: at a located check (only for logs without traceback frames or release evidence)
    equivalents: list[Equivalent] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _omit_no_equivalents(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if not data.get("equivalents"):
            data.pop("equivalents", None)
        return data


class Incident(_KbIncident):
    """:class:`kb.incidents.Incident` whose ``expected`` may carry equivalents."""

    expected: Expected


def parse_incidents(lines: Iterable[str], origin: str = "<string>") -> list[Incident]:
    """Incidents from JSONL lines (blank and ``//`` lines skipped)."""
    out: list[Incident] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            out.append(Incident.model_validate(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise IncidentError(f"{origin}:{n}: {str(exc)[:400]}") from exc
    return out


def read_incidents(paths: Iterable[str | Path]) -> list[Incident]:
    """Incidents from ``paths`` (files or folders of ``*.jsonl``); ids unique across all."""
    files: list[Path] = []
    for p in (Path(x) for x in paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.jsonl")))
        elif p.is_file():
            files.append(p)
        else:
            raise IncidentError(f"no such incident file: {p}")
    out: list[Incident] = []
    seen: set[str] = set()
    for f in files:
        for inc in parse_incidents(f.read_text(encoding="utf-8").splitlines(), str(f)):
            if inc.id in seen:
                raise IncidentError(f"{f}: duplicate incident id {inc.id!r}")
            seen.add(inc.id)
            out.append(inc)
    return out


def shipped_paths() -> list[Path]:
    return [INCIDENTS_DIR / name for name in SHIPPED if (INCIDENTS_DIR / name).is_file()]


def load_incidents(paths: Iterable[str | Path] | None = None) -> list[Incident]:
    """Incidents from ``paths`` (files or folders of ``*.jsonl``); the shipped ones by default.

    Ids must be unique across everything loaded.
    """
    return read_incidents(shipped_paths() if paths is None else paths)


__all__ = ["CATEGORIES", "INCIDENTS_DIR", "SHIPPED", "Category", "Equivalent", "Expected",
           "ExpectedLocation", "FixSpec", "Incident", "IncidentError", "categorize", "dump_incidents", "load_incidents",
           "parse_incidents", "read_incidents", "shipped_paths"]
