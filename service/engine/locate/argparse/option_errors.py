"""The answers to the argparse errors about one known option: an invalid choice (the closest
valid one, and the releases where the value is valid), an invalid value (the type expected, and
the value it reads as), a missing value (how the option takes one; ``--flag=-value`` for a value
that starts with ``-``), an ambiguous abbreviation (the options it could mean, and the full
spelling when they are one option) and a required option not given.
"""

from __future__ import annotations

from typing import Any

from kb.catalog_types import FlagSpec
from kb.catalogs import load_catalog
from service.engine.locate.argparse.words import (
    choice_value,
    closest_choices,
    declaration_line,
    describe_spec,
    resolve_spelling,
)
from service.engine.locate.argparse.work import Work
from service.engine.locate.flag_history import releases_with_flags, scoped_catalog
from service.engine.logparse.argparse_errors import ArgparseError

__all__ = [
    "ambiguous_prefix",
    "expected_argument",
    "invalid_choice",
    "invalid_value",
    "required_flags",
]


def invalid_choice(
    err: ArgparseError, w: Work, spec: FlagSpec | None, flag: str | None
) -> tuple[list[object] | None, list[str]]:
    value = err.values[0] if err.values else ""
    valid: list[object] | None = (
        list(spec.choices)
        if spec is not None and spec.choices
        else (None if err.choices is None else list(err.choices))
    )
    closest = closest_choices(value, valid) if valid else []
    if closest and flag:
        w.edits.append({"set": {flag: choice_value(spec, closest[0])}})
    other = _choice_elsewhere(w, spec, value)
    note = f"{value!r} is not a valid choice for {flag} in {w.release}"
    if closest:
        note += f"; closest: {', '.join(closest)}"
    if other:
        note += f"; it is a valid choice in {', '.join(other)}"
    if valid and not closest:
        note += f"; valid choices in {w.release}: {', '.join(str(c) for c in valid[:30])}"
    w.notes.append(note)
    return valid, closest


def _choice_elsewhere(w: Work, spec: FlagSpec | None, value: str) -> list[str]:
    if spec is None:
        return []
    out = []
    for rel in releases_with_flags(w.store):
        if rel == w.release:
            continue
        try:
            other = scoped_catalog(load_catalog(w.store, rel), w.scope).by_attr().get(spec.attr)
        except Exception:  # a release without catalog is skipped
            continue
        if other is not None and other.choices and value in [str(c) for c in other.choices]:
            out.append(rel)
    return out


def _coerce(spec: FlagSpec, value: str) -> object | None:
    text = value.strip().replace("_", "")
    try:
        if spec.type == "int":
            f = float(text.replace(",", ""))
            return int(f) if f.is_integer() else None
        if spec.type == "float":
            return float(text.replace(",", "."))
    except ValueError:
        return None
    return None


def invalid_value(err: ArgparseError, w: Work, spec: FlagSpec | None, flag: str | None) -> None:
    value = err.values[0] if err.values else ""
    if spec is None:
        w.notes.append(f"{value!r} is not a valid value for {flag}")
        return
    fixed = _coerce(spec, value)
    w.notes.append(
        f"{flag} expects a value of type {spec.type or 'str'} ({describe_spec(spec)}); "
        f"got {value!r}"
    )
    if fixed is not None and flag:
        w.edits.append({"set": {flag: fixed}})
        w.notes.append(f"{value!r} reads as {fixed!r}")


def expected_argument(err: ArgparseError, w: Work, spec: FlagSpec | None, flag: str | None) -> None:
    if spec is None or flag is None:
        w.notes.append(f"{flag} needs a value")
        return
    need = {"+": "at least one value", "*": "values", "?": "an optional value"}.get(
        spec.nargs or "",
        "one value" if not (spec.nargs or "").isdigit() else f"{spec.nargs} values",
    )
    note = f"{flag} expects {need} ({describe_spec(spec)})"
    if w.argv is not None:
        for i, tok in enumerate(w.argv):
            if resolve_spelling(tok, w.catalog) is not spec or "=" in tok:
                continue
            nxt = w.argv[i + 1] if i + 1 < len(w.argv) else None
            if nxt is None:
                note += "; it is the last token of the command, with no value after it"
            elif nxt.startswith("-") and resolve_spelling(nxt, w.catalog) is None:
                note += (
                    f"; the next token {nxt!r} starts with '-', so argparse reads it as an "
                    f"option: write {tok}={nxt}"
                )
                w.edits.append({"inline": {tok: nxt}})
            elif nxt.startswith("-"):
                note += f"; it is followed directly by the option {nxt}"
    w.notes.append(note)


def ambiguous_prefix(err: ArgparseError, w: Work, flag: str | None) -> None:
    prefix = (flag or "").split("=", 1)[0]
    by_flag = w.catalog.by_flag()
    here = [f for f in by_flag if prefix and f.startswith(prefix)]
    cands = here or list(err.choices or [])
    w.suggestions.extend(c for c in cands if c not in w.suggestions)
    note = f"{prefix} is an abbreviation of several options: {', '.join(cands)}"
    if here and len({by_flag[c].attr for c in here}) == 1:
        target = here[0]
        edit = _expand_edit(prefix, target, by_flag[target], w.argv)
        if edit is not None:
            w.edits.append(edit)
        note += f"; in {w.release} they are all {target}"
    else:
        note += "; spell the option out in full"
    w.notes.append(note)


def _expand_edit(
    prefix: str, target: str, spec: FlagSpec, argv: list[str] | None
) -> dict[str, Any] | None:
    """Replace an abbreviation by the full spelling, keeping its value from ``argv``."""
    if not spec.takes_value:
        return {"remove": [prefix], "set": {target: True}}
    if argv is None:
        return None
    for i, tok in enumerate(argv):
        name, eq, inline = tok.partition("=")
        if name == prefix:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            return None if value is None else {"remove": [prefix], "set": {target: value}}
    return None


def required_flags(err: ArgparseError, w: Work) -> None:
    for flag in err.flags:
        spec = resolve_spelling(flag, w.catalog)
        w.history_flags.append(flag)
        if spec is None:
            w.notes.append(f"{flag} is required")
            continue
        w.line = w.line or declaration_line(spec)
        helptext = f": {spec.help}" if spec.help else ""
        w.notes.append(f"{flag} is required and was not given{helptext}")
