"""The candidate fix and its verdict, shared by the proposer, the ranking and repair.

An :class:`Edit` names attributes (``tp_size``), never spellings: the answer spells
them as the user did (:mod:`service.engine.fixes.present`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.engine.evaluate.path_condition import PathEvaluation

__all__ = ["Edit", "Verdict"]


@dataclass
class Edit:
    set: dict[str, object] = field(default_factory=dict)  # attr -> value
    remove: list[str] = field(default_factory=list)  # attrs
    origin: str = ""
    #: among otherwise equal candidates, lower first (0: a value tuple SGLang itself
    #: chooses that agrees with every value the user set)
    preference: int = 1
    #: said on the fix: rule cards that refused other values of a flag this edit sets
    #: (:func:`~service.engine.fixes.filters.backend_refusals`)
    notes: list[str] = field(default_factory=list)
    #: set when the edit flips an early exit instead of fixing the check: what it turns off
    #: (:func:`~service.engine.fixes.filters.guard_flip`); never recommended without replay
    skips: str = ""

    def key(self) -> tuple[Any, ...]:
        return (
            tuple(sorted((k, repr(v)) for k, v in self.set.items())),
            tuple(sorted(self.remove)),
        )

    def size(self) -> int:
        return len(self.set) + len(self.remove)


@dataclass
class Verdict:
    edit: Edit
    fixes_check: object  # True / False / UNKNOWN
    trips: list[dict[str, Any]] = field(default_factory=list)  # checks that would fire instead
    unknown_neighbours: int = 0
    evaluation: PathEvaluation | None = None

    @property
    def ok(self) -> bool:
        return self.fixes_check is True and not self.trips
