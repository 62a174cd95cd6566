"""Record types of the code facts ingest stores and the engine reads back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Check", "Guard"]


@dataclass
class Guard:
    """One condition a statement runs under, as stored in ``checks.guards``, ``refs.guards``
    and ``calls.guards`` (outermost first)."""

    condition: str
    polarity: bool  # True: the statement runs when the condition holds
    line: int
    kind: str  # "if" | "elif" | "else" | "while" | "early_exit" | "match"

    def as_dict(self) -> dict[str, object]:
        return {
            "condition": self.condition,
            "polarity": self.polarity,
            "line": self.line,
            "kind": self.kind,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Guard:
        return cls(d["condition"], d["polarity"], d["line"], d["kind"])


@dataclass(frozen=True)
class Check:
    """One check ingest found in a release, as the ``checks`` view stores it: an ``assert``
    (``kind == "assert"``) or a ``raise`` (``kind == "raise"``) and the guards it runs
    under.

    ``condition`` is the asserted test, or the test of the ``if`` that raises (``None``
    for a raise no test leads to); ``test_start``/``test_end`` span that test's lines.
    ``bare`` marks an assert without a message. ``guards`` are the conditions the
    statement runs under, outermost first, as :meth:`Guard.as_dict` gives them.
    """

    id: int
    release: str
    path: str
    function: str
    kind: str
    exc_type: str | None
    bare: bool
    condition: str | None
    message: str | None
    start_line: int
    end_line: int
    test_start: int | None
    test_end: int | None
    guards: list[dict[str, Any]]
    source: str = ""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Check:
        """A check from a ``checks`` row (``guards`` decoded, or still JSON text); keys a
        row lacks take their empty value (``None``, ``False``, no guards, line 0)."""
        guards = row.get("guards") or []
        if isinstance(guards, str):
            guards = json.loads(guards or "[]")
        start = int(row.get("start_line") or 0)
        return cls(
            id=int(row.get("id") or 0),
            release=str(row.get("release") or ""),
            path=str(row.get("path") or ""),
            function=str(row.get("function") or ""),
            kind=str(row.get("kind") or ""),
            exc_type=row.get("exc_type"),
            bare=bool(row.get("bare")),
            condition=row.get("condition"),
            message=row.get("message"),
            start_line=start,
            end_line=int(row.get("end_line") or start),
            test_start=row.get("test_start"),
            test_end=row.get("test_end"),
            guards=list(guards),
            source=str(row.get("source") or ""),
        )
