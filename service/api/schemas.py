"""The API's request bodies: strict, bounded pydantic models.

Every string is bounded, nothing nests beyond what the route needs, and
unknown fields are refused (422). A confirmation's flags are checked against
the catalog of the release the stored triage was answered for.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = [
    "MAX_NOTE",
    "ConfirmRequest",
    "FixEdit",
    "FlagValue",
    "NoFlagFix",
    "RankedFix",
    "TriageRequest",
]

#: Characters a confirmation note may hold.
MAX_NOTE = 2000

FlagName = Annotated[str, StringConstraints(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
Scalar = Annotated[str, StringConstraints(max_length=500)] | int | float | bool | None
FlagValue = Scalar | Annotated[list[Scalar], Field(max_length=64)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FixEdit(_Strict):
    """The edit that fixed it: flags set (flag -> value) and flags removed."""

    set: Annotated[dict[FlagName, FlagValue], Field(max_length=64)] = {}
    remove: Annotated[list[FlagName], Field(max_length=64)] = []


class RankedFix(_Strict):
    """The n-th fix of the answer (1 = the first)."""

    rank: Annotated[int, Field(ge=1, le=100)]


class NoFlagFix(_Strict):
    """No flag change fixed it (an upgrade, a different model ...): what did."""

    no_flag_fix: Annotated[str, StringConstraints(min_length=1, max_length=500)]


class ConfirmRequest(_Strict):
    fix: FixEdit | RankedFix | NoFlagFix
    note: Annotated[str, StringConstraints(max_length=MAX_NOTE)] = ""
    #: which front end the confirmation came from (``export-incidents --source``)
    source: Literal["api", "web"] = "api"

    def flags(self) -> list[str]:
        """The flags the confirmation names (none for a ranked or no-flag fix)."""
        if isinstance(self.fix, FixEdit):
            return [*self.fix.set, *self.fix.remove]
        return []

    def fix_dict(self) -> dict[str, Any]:
        return self.fix.model_dump()


class TriageRequest(_Strict):
    log: Annotated[str, StringConstraints(max_length=8 << 20)]
    command: (
        Annotated[str, StringConstraints(max_length=100_000)]
        | Annotated[
            list[Annotated[str, StringConstraints(max_length=10_000)]], Field(max_length=2000)
        ]
        | None
    ) = None
    release: Annotated[str, StringConstraints(max_length=100)] | None = None
    hardware: Annotated[str, StringConstraints(max_length=100)] | None = None
    model: Annotated[str, StringConstraints(max_length=500)] | None = None
    model_arch: Annotated[str, StringConstraints(max_length=200)] | None = None
    python: Annotated[str, StringConstraints(max_length=20)] | None = None
