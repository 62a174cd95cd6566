"""Recorded incidents: the JSONL format, its pydantic model, reader and writer.

One JSON object per line (see ``evals/README.md`` for every field). The format
lives in the KB because confirmed triages become incidents here
(:mod:`kb.recording`, served by the API's ``/incidents``); the shipped files and
the default set are :mod:`evals.incidents`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

Category = Literal[
    "speculative",
    "attention",
    "parallelism",
    "page_size",
    "quantization",
    "disaggregation",
    "argparse",
    "other",
]
CATEGORIES: tuple[str, ...] = (
    "speculative",
    "attention",
    "parallelism",
    "page_size",
    "quantization",
    "disaggregation",
    "argparse",
    "other",
)


class ExpectedLocation(BaseModel):
    """The check that fired. Lines are None when the crashing release is not ingested."""

    model_config = ConfigDict(extra="forbid")

    path: str
    function: str
    start_line: int | None = None
    end_line: int | None = None


class FixSpec(BaseModel):
    """One acceptable command-line edit: flags to set (spelling -> value) and to drop, and
    flags to set to any number in a closed range (``within``: spelling -> ``[low, high]``,
    for a check that holds past a bound, such as a memory fraction above what the message
    printed). ``within`` is left out of the JSON when empty."""

    model_config = ConfigDict(extra="forbid")

    set: dict[str, Any] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)
    within: dict[str, tuple[float, float]] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _omit_no_range(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("within"):
            data.pop("within", None)
        return data


class Equivalent(BaseModel):
    """Another ingested release that reproduces the incident's crash log exactly, and the
    check (lines included) its own validation raised in when replayed."""

    model_config = ConfigDict(extra="forbid")

    release: str
    path: str
    function: str
    start_line: int
    end_line: int


class Expected(BaseModel):
    """What a correct triage says."""

    model_config = ConfigDict(extra="forbid")

    #: the ingested release the location refers to (None: the crash's release is not
    #: ingested and no ingested release is the right answer; release@1 is not scored)
    release: str | None = None
    location: ExpectedLocation | None = None
    root_cause_flags: list[str] = Field(default_factory=list)
    acceptable_fixes: list[FixSpec] = Field(default_factory=list)
    #: None when a flag edit fixes it; else "upgrade", "code bug" or a reason
    no_flag_fix: str | None = None
    #: other releases whose own validation, replayed, turns the same command into the same
    #: exception and message (only for logs with neither traceback frames nor release
    #: evidence): each is a right answer too. Left out of the JSON when empty.
    equivalents: list[Equivalent] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _omit_no_equivalents(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("equivalents"):
            data.pop("equivalents", None)
        return data


class Incident(BaseModel):
    """One crash with its expected triage."""

    model_config = ConfigDict(extra="forbid")

    id: str
    source: str
    release: str | None = None
    hardware: str | None = None
    model: str | None = None
    model_arch: str | None = None
    command: list[str] | str | None = None
    crash_log: str
    expected: Expected
    category: Category
    notes: str = ""
    #: who confirmed the ground truth ("replay:<release>" once SGLang's own validation
    #: reproduced it, "user:<triage id>" for a confirmed triage); None: not yet confirmed
    confirmed_by: str | None = None
    #: the start-up check family of a crash past argument validation (``block_shape``,
    #: ``moe_runner_a2a``, ``layer_attention_backend``, ``memory_pool``: see
    #: ``evals/families``); left out of the JSON when None
    family: str | None = None

    @model_serializer(mode="wrap")
    def _omit_no_family(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("family") is None:
            data.pop("family", None)
        return data

    @field_validator("crash_log")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("crash_log is empty")
        return value

    def command_argv(self) -> list[str]:
        """The command as an argv list (a string is split like a shell would)."""
        import shlex

        if self.command is None:
            return []
        if isinstance(self.command, list):
            return list(self.command)
        text = self.command.replace("\\\n", " ")
        try:
            return shlex.split(text)
        except ValueError:
            return text.split()


_PARALLEL_ATTRS = (
    "tp_size",
    "dp_size",
    "pp_size",
    "ep_size",
    "enable_dp_attention",
    "nnodes",
    "attn_cp_size",
    "moe_dp_size",
    "context_parallel",
    "dcp_size",
    "cp_size",
)


def categorize(path: str, function: str, root: list[str]) -> Category:
    """The category of a crash at the check of ``function`` in ``path`` whose root-cause
    attributes are ``root``: from the attributes first, then the check's function."""
    fn = f"{path} {function}".lower()
    attrs = " ".join(root)
    if "page_size" in root:
        return "page_size"
    if "disaggregation" in fn or "disaggregation" in attrs:
        return "disaggregation"
    if "speculative" in fn or "speculative" in attrs:
        return "speculative"
    if any(k in attrs for k in ("quantization", "dtype", "fp8", "fp4", "kv4")) or any(
        k in fn for k in ("quant", "kv4", "fp8", "fp4")
    ):
        return "quantization"
    if "attention_backend" in attrs or "attention" in fn or "attn" in fn:
        return "attention"
    if any(a in attrs for a in _PARALLEL_ATTRS) or any(
        k in fn for k in ("parallel", "moe", "a2a", "eplb", "elastic_ep")
    ):
        return "parallelism"
    return "other"


class IncidentError(ValueError):
    """A malformed incident file (names the file and line)."""


def parse_incidents(lines: Iterable[str], origin: str = "<string>") -> list[Incident]:
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
    """Incidents from ``paths`` (files or folders of ``*.jsonl``).

    Ids must be unique across everything read.
    """
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


def dump_incidents(incidents: Iterable[Incident], path: str | Path) -> Path:
    """Write ``incidents`` as JSONL (one object per line, stable key order)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(
        json.dumps(i.model_dump(mode="json"), ensure_ascii=False) + "\n" for i in incidents
    )
    path.write_text(text, encoding="utf-8")
    return path


__all__ = [
    "CATEGORIES",
    "Category",
    "Equivalent",
    "Expected",
    "ExpectedLocation",
    "FixSpec",
    "Incident",
    "IncidentError",
    "categorize",
    "dump_incidents",
    "parse_incidents",
    "read_incidents",
]
