"""Explain an argparse error (``launch_server.py: error: ...``) against one release.

An argparse failure has no traceback: the parser printed one line and exited
with status 2. :func:`diagnose_argparse` reads the parsed line
(:class:`~service.engine.logparse.argparse_errors.ArgparseError`) with the flag
catalog of the release that printed it and answers:

* which valid spellings are closest (``--reasoning_parser`` -> ``--reasoning-parser``);
* for an invalid choice, the valid choices of that release and the closest one;
* for an invalid value, the type the flag expects; for a missing value, how the
  flag takes one; for a required flag, what it is; for an ambiguous prefix, the
  candidates;
* the flag's history across every ingested release (added, removed, renamed);
* edits in :func:`~service.engine.flags.parse.apply_edits` terms (``remove`` /
  ``set``) and, when the command is known, the corrected argv.

Two edit keys go beyond ``apply_edits``: ``drop`` lists stray value tokens to
delete (e.g. ``true`` after a ``store_true`` flag) and ``inline`` maps a flag to
a value that must be written ``--flag=value`` because it starts with ``-``. Both
are applied when building ``fixed_argv``
(:func:`~service.engine.locate.argparse.work.fixed_argv`).

The answers per kind of error are in :mod:`~service.engine.locate.argparse.unrecognized`
and :mod:`~service.engine.locate.argparse.option_errors`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kb.catalog_types import Catalog
from kb.catalogs import load_catalog
from kb.store import Store
from service.engine.flags.parse import parse_argv, suggest_flag
from service.engine.locate.argparse.foreign import which_parser
from service.engine.locate.argparse.option_errors import (
    ambiguous_prefix,
    expected_argument,
    invalid_choice,
    invalid_value,
    required_flags,
)
from service.engine.locate.argparse.unrecognized import unrecognized_arguments
from service.engine.locate.argparse.words import declaration_line, resolve_spelling
from service.engine.locate.argparse.work import Work, fixed_argv
from service.engine.locate.flag_history import FlagHistory, Scope
from service.engine.logparse.argparse_errors import ArgparseError

__all__ = ["ArgparseDiagnosis", "diagnose_argparse", "reparse_problems"]


class ArgparseDiagnosis(BaseModel):
    kind: str
    flag: str | None
    value: str | None
    suggestions: list[str]  # nearest valid spellings in this release
    valid_choices: list[object] | None  # for invalid_choice
    closest_choices: list[str]  # for invalid_choice: valid choices nearest the value
    history: list[FlagHistory]
    edits: list[dict[str, Any]]
    fixed_argv: list[str] | None
    flag_line: tuple[str, int] | None
    explanation: str
    parser: Scope = "llm"  # which of SGLang's parsers refused the command
    foreign_sources: list[str] = []  # declarations of other engines' flags the answer names


def diagnose_argparse(
    err: ArgparseError,
    argv: list[str] | None,
    store: Store,
    release: str,
    scope: Scope | None = None,
) -> ArgparseDiagnosis:
    """Explain ``err`` with the flag catalog of ``release`` (see the module docstring); the
    flags of the parser that printed it (``scope``, else
    :func:`~service.engine.locate.argparse.foreign.which_parser`)."""
    full = load_catalog(store, release)
    scope = scope or which_parser(err, argv, full)
    w = Work(store, release, full, list(argv) if argv is not None else None, scope)
    catalog = w.catalog
    # "--model-path/--model" (argparse's display of one option) -> its first spelling
    err = err.model_copy(update={"flags": [f.split("/", 1)[0] for f in err.flags]})
    flag = err.flags[0] if err.flags else None
    value = err.values[0] if err.values else None
    spec = resolve_spelling(flag, catalog) if flag else None
    valid: list[object] | None = None
    closest: list[str] = []
    if err.kind == "unrecognized_arguments":
        flag, value = unrecognized_arguments(err, w)
    elif err.kind == "invalid_choice":
        valid, closest = invalid_choice(err, w, spec, flag)
    elif err.kind == "invalid_value":
        invalid_value(err, w, spec, flag)
    elif err.kind == "expected_argument":
        expected_argument(err, w, spec, flag)
    elif err.kind == "ambiguous":
        ambiguous_prefix(err, w, flag)
    elif err.kind == "required":
        required_flags(err, w)
    else:
        w.notes.append(err.message)
    if err.kind not in ("unrecognized_arguments", "required"):
        w.history_flags.extend(err.flags[:1])
        if spec is not None:
            w.line = w.line or declaration_line(spec)
        elif flag and err.kind != "ambiguous":
            w.suggestions.extend(s for s in suggest_flag(flag, catalog) if s not in w.suggestions)
    if spec is not None and spec.deprecated and spec.help:
        w.notes.append(f"{flag} is deprecated in {release}: {spec.help}")
    return ArgparseDiagnosis(
        kind=err.kind,
        flag=flag,
        value=value,
        suggestions=w.suggestions,
        valid_choices=valid,
        closest_choices=closest,
        history=w.history(),
        edits=w.edits,
        fixed_argv=fixed_argv(w),
        flag_line=w.line,
        parser=scope,
        foreign_sources=w.foreign,
        explanation=f"argparse{_by(scope)} rejected the command: {err.message}{_lead(w)}. "
        + " ".join(n if n.endswith(".") else n + "." for n in w.notes),
    )


def _lead(w: Work) -> str:
    return f" ({'; '.join(w.leads)})" if w.leads else ""


def _by(scope: Scope) -> str:
    return " (of SGLang's diffusion server)" if scope == "diffusion" else ""


def reparse_problems(argv: list[str], catalog: Catalog) -> list[str]:
    """Unknown tokens and errors left when ``argv`` is parsed again (empty: clean)."""
    parsed = parse_argv(argv, catalog)
    return [*parsed.unknown, *parsed.errors]
