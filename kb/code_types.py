"""Record types of the code facts ingest stores and the engine reads back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Guard"]


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
