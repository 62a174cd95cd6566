"""The rule cards' answers for the front ends: lint a command line, list the cards.

The API serves :func:`lint_payload` as ``POST /lint`` and :func:`rules_payload`
as ``GET /rules``; ``sglang-triage lint`` (:mod:`service.cli.lint`) prints the
same report. Both raise the project's
:class:`~kb.errors.TriageError` subclasses, so the usual status
mapping applies (unknown release -> 404, bad hardware name -> 400).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from kb.errors import ConfigError
from kb.rules.cards import load_curated
from kb.store import Store
from service.engine.rules.checker import cards_for
from service.engine.rules.derive import derive_cards
from service.engine.rules.lint import lint

__all__ = ["LintRequest", "lint_payload", "rules_payload", "split_command"]

_PROGRAMS = (
    "sglang",
    "serve",
    "python",
    "python3",
    "-m",
    "sglang.launch_server",
    "sglang.launch_server",
)


def split_command(flags: list[str] | str) -> list[str]:
    """Flags only: a command string is shell-split and a leading launcher dropped.

    ``python -m sglang.launch_server --tp 8`` and ``sglang serve --tp 8`` both give
    ``["--tp", "8"]``; a bare flag list is returned as it is.
    """
    tokens = shlex.split(flags) if isinstance(flags, str) else [str(t) for t in flags]
    i = 0
    while (
        i < len(tokens)
        and not tokens[i].startswith("-")
        and (tokens[i] in _PROGRAMS or tokens[i].endswith(("/python", "/python3", "/sglang")))
    ):
        i += 1
    if i < len(tokens) and tokens[i] == "-m" and i + 1 < len(tokens):
        i += 2
    return tokens[i:]


class LintRequest(BaseModel):
    """Body of ``POST /lint``: ``flags`` (argv tokens) or ``command`` (one string)."""

    model_config = ConfigDict(extra="forbid")

    release: str = Field(min_length=1, max_length=64)
    flags: list[Annotated[str, StringConstraints(max_length=10_000)]] | None = Field(
        default=None, max_length=4096
    )
    command: str | None = Field(default=None, max_length=100_000)
    hardware: str | None = Field(default=None, max_length=100)
    model_arch: str | None = Field(default=None, max_length=200)
    env: dict[
        Annotated[str, StringConstraints(max_length=200)],
        Annotated[str, StringConstraints(max_length=10_000)],
    ] = Field(default_factory=dict, max_length=256)

    @model_validator(mode="after")
    def _one_of(self) -> LintRequest:
        if self.flags is None and self.command is None:
            raise ValueError("give `flags` (a list of tokens) or `command` (a string)")
        return self


def lint_payload(store: Store, body: dict[str, Any] | LintRequest) -> dict[str, Any]:
    """``POST /lint``: the :class:`~service.engine.rules.lint.LintReport` as JSON-ready data.

    Raises :class:`ConfigError` for a malformed body or hardware name and
    :class:`~kb.errors.ReleaseNotIngested` for a release not in the KB.
    """
    try:
        req = body if isinstance(body, LintRequest) else LintRequest.model_validate(body)
    except ValidationError as exc:
        raise ConfigError(
            f"invalid lint request: {exc.errors()[0]['msg']}",
            details={"errors": exc.errors(include_url=False)},
        ) from exc
    try:
        argv = split_command(req.flags if req.flags is not None else req.command or "")
    except ValueError as exc:  # shlex: unbalanced quotes
        raise ConfigError(f"cannot split the command: {exc}") from exc
    report = lint(store, req.release, argv, req.hardware, req.model_arch, env=req.env or None)
    return report.model_dump(mode="json")


def rules_payload(
    store: Store,
    release: str | None = None,
    origin: str | None = None,
    severity: str | None = None,
    q: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> dict[str, Any]:
    """``GET /rules``: cards (curated first), filtered by release range, origin, severity, text."""
    cards = cards_for(store, release) if release else [*load_curated(), *derive_cards(store)]
    if origin:
        cards = [c for c in cards if c.origin == origin]
    if severity:
        cards = [c for c in cards if c.severity == severity]
    if q:
        needle = q.lower()
        cards = [
            c
            for c in cards
            if needle in c.title.lower()
            or needle in c.id
            or needle in c.when.lower()
            or needle in c.require.lower()
        ]
    cards = sorted(cards, key=lambda c: (c.origin != "curated", c.id))
    limit = max(1, min(limit, 1000))
    page = cards[max(offset, 0) : max(offset, 0) + limit]
    return {
        "count": len(cards),
        "offset": offset,
        "limit": limit,
        "cards": [c.model_dump(mode="json", by_alias=True) for c in page],
    }


# ----------------------------------------------------------------------------- CLI
