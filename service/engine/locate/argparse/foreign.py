"""Unrecognized flags that are not typos: another engine's flags, and flags another parser has.

Three answers for a flag SGLang's argparse refused, before "no such option":

* :func:`which_parser` — SGLang has two command-line parsers, the LLM server's and the
  diffusion server's (``sglang serve`` with a diffusion model, ``sglang/multimodal_gen``).
  The log may say which one ran (:attr:`ArgparseError.parser`); otherwise the command's
  other flags decide: flags only the diffusion parser knows and none only the LLM
  parser knows mean the diffusion parser.
* :func:`known_here` — the flag *is* a spelling of the release's parser of that scope (an
  alias such as ``--tensor-parallel-size``), or of its other parser. Then SGLang of that
  release would have accepted it, so the command ran under another parser or release;
  the answer says so and never that the flag exists nowhere.
* :func:`foreign_answer` — the flag belongs to another engine (``kb/data/foreign_flags.json``:
  vLLM's ``--gpu-memory-utilization``): the answer names the engine and its declaration, and
  replaces the flag with SGLang's, cited from the release's catalog (``release:path:line``).
  A mapping whose SGLang flag the release lacks is not offered.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from kb.catalog_types import Catalog, FlagSpec
from kb.foreign_flags import ForeignFlag, foreign_flag
from service.engine.flags.parse import parse_argv
from service.engine.locate.argparse.words import describe_spec, resolve_spelling
from service.engine.locate.flag_history import SCOPE_NAMES, Scope, scoped_catalog
from service.engine.logparse.argparse_errors import ArgparseError

__all__ = ["ForeignAnswer", "foreign_answer", "known_here", "which_parser"]

_FLAG_RE = re.compile(r"(?<![\w-])--[A-Za-z][\w-]{0,100}")


class ForeignAnswer(BaseModel):
    """What to do with one foreign flag: the edit (None: nothing safe to apply), the note,
    the SGLang declaration cited (``path``, ``line``) and the foreign one (``source``)."""

    edit: dict[str, Any] | None
    engine: str
    note: str
    target: str | None
    line: tuple[str, int] | None
    source: str


def _flags_of(argv: list[str] | None, usage: str | None, skip: set[str]) -> set[str]:
    found = {t.split("=", 1)[0] for t in argv or [] if t.startswith("--")}
    found.update(_FLAG_RE.findall(usage or ""))
    return found - skip


def which_parser(err: ArgparseError, argv: list[str] | None, catalog: Catalog) -> Scope:
    """The parser that printed ``err`` (see the module docstring); the LLM server's by default."""
    if err.parser is not None:
        return err.parser
    if not catalog.diffusion:
        return "llm"
    llm, diff = catalog.by_flag(), scoped_catalog(catalog, "diffusion").by_flag()
    seen = _flags_of(argv, err.usage, {f.split("=", 1)[0] for f in err.flags})
    diffusion_only = [f for f in seen if f in diff and f not in llm]
    llm_only = [f for f in seen if f in llm and f not in diff]
    return "diffusion" if diffusion_only and not llm_only else "llm"


def known_here(
    flag: str, catalog: Catalog, scope: Scope, release: str
) -> tuple[str, FlagSpec | None]:
    """A note when ``flag`` is a spelling of either parser of ``release``, or a unique prefix
    argparse expands to one (else ``""``), and the spec of the ``scope`` parser that has it."""
    name = flag.split("=", 1)[0]
    mine = resolve_spelling(name, scoped_catalog(catalog, scope))
    other_scope: Scope = "diffusion" if scope == "llm" else "llm"
    theirs = resolve_spelling(name, scoped_catalog(catalog, other_scope))
    if mine is not None:
        abbrev = (
            ""
            if name in mine.flags
            else f" (argparse takes it as an abbreviation of {mine.flags[0]})"
        )
        return (
            f"{name} is an option of {SCOPE_NAMES[scope]} in SGLang {release}{abbrev} "
            f"(declared at {release}:{mine.path}:{mine.line}), so that parser would accept it: "
            "the command was parsed by another release or another parser; check the installed "
            "version (python -c 'import sglang; print(sglang.__version__)') and the entry point",
            mine,
        )
    if theirs is not None:
        return (
            f"{name} is an option of {SCOPE_NAMES[other_scope]} in SGLang {release} "
            f"(declared at {release}:{theirs.path}:{theirs.line}), not of "
            f"{SCOPE_NAMES[scope]}, which parsed this command",
            None,
        )
    return "", None


def _tp_value(argv: list[str] | None, catalog: Catalog) -> object | None:
    if argv is None:
        return None
    parsed = parse_argv(argv, catalog)
    hit = parsed.values.get("tp_size")
    return hit.value if hit is not None else None


def _companions(
    entry: ForeignFlag, value: str | None, argv: list[str] | None, catalog: Catalog
) -> dict[str, object]:
    """The ``also`` flags the release has and the command does not set."""
    by_flag = catalog.by_flag()
    given = parse_argv(argv, catalog).values if argv is not None else {}
    out: dict[str, object] = {}
    for c in entry.also:
        spec = by_flag.get(c.flag)
        if spec is None or spec.attr in given:
            continue
        if c.value == "plus_one":
            try:
                out[c.flag] = int(value or "") + 1
            except ValueError:
                continue
        else:
            out[c.flag] = c.value
    return out


def foreign_answer(
    flag: str, values: list[str], argv: list[str] | None, catalog: Catalog, release: str
) -> ForeignAnswer | None:
    """The answer for another engine's ``flag`` typed with ``values`` (None: not in the table)."""
    entry = foreign_flag(flag)
    if entry is None:
        return None
    whose = f"{flag} is {entry.engine}'s flag (declared at {entry.source}), not SGLang's"
    why = f" ({entry.note})" if entry.note else ""
    by_flag = catalog.by_flag()
    target = next((s for s in entry.sglang if s in by_flag), None)
    if entry.value == "drop" or target is None:
        lacks = f"; SGLang {release} has no {' or '.join(entry.sglang)}" if entry.sglang else ""
        why = f"; {entry.note}" if entry.note else "; SGLang has no equivalent"
        return ForeignAnswer(
            engine=entry.engine,
            edit={"remove": [flag]},
            note=whose + lacks + why + "; remove it",
            target=None,
            line=None,
            source=entry.source,
        )
    spec = by_flag[target]
    here = f"{release}:{spec.path}:{spec.line}"
    head = f"{whose}; SGLang {release}'s is {target} ({describe_spec(spec)}; declared at {here})"
    if spec.deprecated:
        why += f"; {target} is deprecated in {release}" + (f": {spec.help}" if spec.help else "")
    value: object | None
    if entry.value == "switch" or not spec.takes_value:
        value = True if not spec.takes_value else (values[0] if values else None)
    elif entry.value == "tp":
        value = _tp_value(argv, catalog)
    else:
        value = (values if spec.nargs in ("+", "*") else values[0]) if values else None
    if value is None:
        return ForeignAnswer(
            engine=entry.engine,
            edit={"remove": [flag]},
            note=head + why + f"; set {target} to the value you need",
            target=target,
            line=(spec.path, spec.line),
            source=entry.source,
        )
    to_set: dict[str, object] = {target: value}
    to_set.update(_companions(entry, values[0] if values else None, argv, catalog))
    shown = " ".join(f"{k} {v}" if v is not True else k for k, v in to_set.items())
    approx = "" if entry.exact else " (an approximation)"
    return ForeignAnswer(
        engine=entry.engine,
        edit={"remove": [flag], "set": to_set},
        note=head + why + f"; replace it with {shown}{approx}",
        target=target,
        line=(spec.path, spec.line),
        source=entry.source,
    )
