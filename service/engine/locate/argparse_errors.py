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
are applied here when building ``fixed_argv``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kb.catalog_types import Catalog, FlagSpec
from kb.catalogs import load_catalog
from kb.store import Store
from service.engine.flags.parse import parse_argv, suggest_flag
from service.engine.locate.argparse_foreign import foreign_answer, known_here, which_parser
from service.engine.locate.argparse_words import (
    _adjacent_values,
    _choice_value,
    _closest,
    _describe,
    _fix,
    _line,
    _normalise,
    _resolve,
    _typo_of,
    _unrecognized_groups,
)
from service.engine.locate.flag_history import (
    FlagHistory,
    Scope,
    _releases,
    flag_history,
    scoped_catalog,
)
from service.engine.logparse.argparse_errors import ArgparseError

__all__ = ["ArgparseDiagnosis", "FlagHistory", "diagnose_argparse", "flag_history"]

_FALSE_WORDS = frozenset({"false", "0", "no", "n", "off", "none"})


class ArgparseDiagnosis(BaseModel):
    kind: str
    flag: str | None
    value: str | None
    suggestions: list[str]  # nearest valid spellings in this release
    valid_choices: list | None  # for invalid_choice
    closest_choices: list[str]  # for invalid_choice: valid choices nearest the value
    history: list[FlagHistory]
    edits: list[dict[str, Any]]
    fixed_argv: list[str] | None
    flag_line: tuple[str, int] | None
    explanation: str
    parser: Scope = "llm"  # which of SGLang's parsers refused the command
    foreign_sources: list[str] = []  # declarations of other engines' flags the answer names


# ---------------------------------------------------------------------------
# history
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# per kind
# ---------------------------------------------------------------------------


class _Work:
    """Mutable state of one diagnosis."""

    def __init__(
        self,
        store: Store,
        release: str,
        catalog: Catalog,
        argv: list[str] | None,
        scope: Scope = "llm",
    ) -> None:
        self.store, self.release, self.full, self.argv = store, release, catalog, argv
        self.scope = scope
        self.catalog = scoped_catalog(catalog, scope)  # the flags of the parser that ran
        self.foreign: list[str] = []
        self.leads: list[str] = []  # short words for the first sentence (the answer's summary)
        self.suggestions: list[str] = []
        self.edits: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.history_flags: list[str] = []
        self.line: tuple[str, int] | None = None

    def history(self) -> list[FlagHistory]:
        seen: list[str] = []
        for f in self.history_flags:
            f = f.split("=", 1)[0]
            if f.startswith("-") and f not in seen:
                seen.append(f)
        return [flag_history(self.store, f, self.release, self.scope) for f in seen]


def _unrecognized(err: ArgparseError, w: _Work) -> tuple[str | None, str | None]:
    first_flag: str | None = None
    first_value: str | None = None
    for flag, values in _unrecognized_groups(err.message):
        if flag is None:
            _stray(values, w)
            continue
        if w.argv is not None:
            values, stray = _adjacent_values(w.argv, flag, values)
            if stray:
                _stray(stray, w)
        first_flag = first_flag or flag
        first_value = first_value or (values[0] if values else None)
        known, spec_here = known_here(flag, w.full, w.scope, w.release)
        if known and spec_here is not None:
            _known(flag, known, spec_here, w)
            continue
        suggestions = suggest_flag(flag, w.catalog)
        hist = flag_history(w.store, flag, w.release, w.scope)
        if (
            _normalise(flag) not in w.catalog.by_flag()
            and hist.renamed_to is None
            and _foreign(flag, values, w)
        ):
            continue
        if known:  # a flag of SGLang's other parser
            _known(flag, known, None, w)
            continue
        for s in suggestions:
            if s not in w.suggestions:
                w.suggestions.append(s)
        target = _rename_target(flag, suggestions, hist, w.catalog)
        # the typed spelling's history when some release has it, else the option's
        w.history_flags.append(flag if hist.present_in or target is None else target)
        if target is None:
            w.edits.append({"remove": [flag]})
            where = f" ({hist.note})" if hist.note else ""
            maybe = f"; closest spellings: {', '.join(suggestions)}" if suggestions else ""
            w.notes.append(
                f"{flag} is not an option of {_whose(w.scope)}SGLang {w.release}{where}{maybe}. "
                "Remove it or use a release that has it."
            )
            continue
        spec = w.catalog.by_flag()[target]
        w.history_flags.append(target)
        w.line = w.line or _line(spec)
        edit, note = _rename_edit(flag, target, spec, values)
        if "_" in flag and target == _normalise(flag):
            w.leads.append(f"SGLang spells it {target}")
            note += (
                f"; argparse matches option strings exactly, and SGLang {w.release} spells "
                "its options with dashes"
                + ("" if any("_" in f for f in w.catalog.by_flag()) else " only")
            )
        w.edits.append(edit)
        w.notes.append(note)
    return first_flag, first_value


def _known(flag: str, note: str, spec: FlagSpec | None, w: _Work) -> None:
    """Answer a flag that is a spelling of either parser of the release (``spec``: of the
    parser that ran; see :func:`~service.engine.locate.argparse_foreign.known_here`)."""
    w.history_flags.append(flag)
    scope = w.scope if spec is not None else ("diffusion" if w.scope == "llm" else "llm")
    w.leads.append(
        f"{flag} is an option of SGLang {w.release}'s "
        f"{'LLM' if scope == 'llm' else 'diffusion'} server"
    )
    if spec is not None:
        w.line = w.line or _line(spec)
        w.notes.append(note)
    else:
        w.edits.append({"remove": [flag]})
        w.notes.append(note + "; remove it")


def _foreign(flag: str, values: list[str], w: _Work) -> bool:
    """Replace another engine's flag by SGLang's (LLM server only); False when it is not one."""
    answer = (
        foreign_answer(flag, values, w.argv, w.catalog, w.release) if w.scope == "llm" else None
    )
    if answer is None:
        return False
    if answer.edit is not None:
        w.edits.append(answer.edit)
    w.notes.append(answer.note)
    w.line = w.line or answer.line
    w.foreign.append(answer.source)
    w.leads.append(
        f"{flag} is {answer.engine}'s flag"
        + (
            f", SGLang's is {answer.target}"
            if answer.target and answer.edit and answer.edit.get("set")
            else ""
        )
    )
    if answer.target:
        w.history_flags.append(answer.target)
    return True


def _rename_target(
    flag: str, suggestions: list[str], hist: FlagHistory, catalog: Catalog
) -> str | None:
    by_flag = catalog.by_flag()
    norm = _normalise(flag)
    if norm in by_flag:
        return norm
    if hist.renamed_to is not None:
        return hist.renamed_to
    if suggestions and not hist.present_in and _typo_of(norm, suggestions[0]):
        return suggestions[0]
    return None


def _rename_edit(
    flag: str, target: str, spec: FlagSpec, values: list[str]
) -> tuple[dict[str, Any], str]:
    why = (
        f"{flag} is not a spelling argparse knows in this release; "
        f"the option is {target} ({_describe(spec)})"
    )
    if not spec.takes_value:
        negated = flag.startswith("--no-") and not target.startswith("--no-")
        falsy = negated or (bool(values) and values[0].lower() in _FALSE_WORDS)
        if negated:
            default = (
                "which is the default"
                if not spec.default
                else f"but its default is {spec.default!r}"
            )
            return {"remove": [flag]}, why + f"; {flag} asked for the negation, {default}"
        if falsy:
            return {
                "remove": [flag]
            }, why + f"; it takes no value, and {values[0]!r} asks for the default"
        extra = f"; it takes no value, so {values[0]!r} is dropped" if values else ""
        return {"remove": [flag], "set": {target: True}}, why + extra
    if not values:
        return {"remove": [flag]}, why + f"; no value was given for {flag}, so add {target} <value>"
    value: object = (
        values
        if spec.nargs in ("+", "*") or (spec.nargs or "").isdigit()
        else _choice_value(spec, values[0])
    )
    return {"remove": [flag], "set": {target: value}}, why + "; rename it keeping the value"


def _stray(values: list[str], w: _Work) -> None:
    """Value tokens argparse could not attach to any option."""
    where = ""
    if w.argv is not None:
        for v in values:
            if v in w.argv:
                i = w.argv.index(v)
                prev = w.argv[i - 1] if i > 0 else None
                spec = _resolve(prev, w.catalog) if prev and prev.startswith("-") else None
                if spec is not None and not spec.takes_value:
                    where = f"; {prev} is a switch ({spec.action}) and takes no value"
                    w.line = w.line or _line(spec)
                    w.history_flags.append(prev)
                elif spec is not None:
                    where = f"; {prev} already took its value(s) ({_describe(spec)})"
                break
    w.edits.append({"drop": list(values)})
    w.notes.append(f"stray value(s) {' '.join(values)} belong to no option{where}")


def _invalid_choice(
    err: ArgparseError, w: _Work, spec: FlagSpec | None, flag: str | None
) -> tuple[list | None, list[str]]:
    value = err.values[0] if err.values else ""
    valid: list | None = list(spec.choices) if spec is not None and spec.choices else err.choices
    closest = _closest(value, valid) if valid else []
    if closest and flag:
        w.edits.append({"set": {flag: _choice_value(spec, closest[0])}})
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


def _choice_elsewhere(w: _Work, spec: FlagSpec | None, value: str) -> list[str]:
    if spec is None:
        return []
    out = []
    for rel in _releases(w.store):
        if rel == w.release:
            continue
        try:
            other = scoped_catalog(load_catalog(w.store, rel), w.scope).by_attr().get(spec.attr)
        except Exception:  # noqa: BLE001 - a release without catalog is skipped
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


def _invalid_value(err: ArgparseError, w: _Work, spec: FlagSpec | None, flag: str | None) -> None:
    value = err.values[0] if err.values else ""
    if spec is None:
        w.notes.append(f"{value!r} is not a valid value for {flag}")
        return
    fixed = _coerce(spec, value)
    w.notes.append(
        f"{flag} expects a value of type {spec.type or 'str'} ({_describe(spec)}); got {value!r}"
    )
    if fixed is not None and flag:
        w.edits.append({"set": {flag: fixed}})
        w.notes.append(f"{value!r} reads as {fixed!r}")


def _expected(err: ArgparseError, w: _Work, spec: FlagSpec | None, flag: str | None) -> None:
    if spec is None or flag is None:
        w.notes.append(f"{flag} needs a value")
        return
    need = {"+": "at least one value", "*": "values", "?": "an optional value"}.get(
        spec.nargs or "",
        "one value" if not (spec.nargs or "").isdigit() else f"{spec.nargs} values",
    )
    note = f"{flag} expects {need} ({_describe(spec)})"
    if w.argv is not None:
        for i, tok in enumerate(w.argv):
            if _resolve(tok, w.catalog) is not spec or "=" in tok:
                continue
            nxt = w.argv[i + 1] if i + 1 < len(w.argv) else None
            if nxt is None:
                note += "; it is the last token of the command, with no value after it"
            elif nxt.startswith("-") and _resolve(nxt, w.catalog) is None:
                note += (
                    f"; the next token {nxt!r} starts with '-', so argparse reads it as an "
                    f"option: write {tok}={nxt}"
                )
                w.edits.append({"inline": {tok: nxt}})
            elif nxt.startswith("-"):
                note += f"; it is followed directly by the option {nxt}"
    w.notes.append(note)


def _ambiguous(err: ArgparseError, w: _Work, flag: str | None) -> None:
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


def _required(err: ArgparseError, w: _Work) -> None:
    for flag in err.flags:
        spec = _resolve(flag, w.catalog)
        w.history_flags.append(flag)
        if spec is None:
            w.notes.append(f"{flag} is required")
            continue
        w.line = w.line or _line(spec)
        helptext = f": {spec.help}" if spec.help else ""
        w.notes.append(f"{flag} is required and was not given{helptext}")


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------


def diagnose_argparse(
    err: ArgparseError,
    argv: list[str] | None,
    store: Store,
    release: str,
    scope: Scope | None = None,
) -> ArgparseDiagnosis:
    """Explain ``err`` with the flag catalog of ``release`` (see the module docstring); the
    flags of the parser that printed it (``scope``, else
    :func:`~service.engine.locate.argparse_foreign.which_parser`)."""
    full = load_catalog(store, release)
    scope = scope or which_parser(err, argv, full)
    w = _Work(store, release, full, list(argv) if argv is not None else None, scope)
    catalog = w.catalog
    # "--model-path/--model" (argparse's display of one option) -> its first spelling
    err = err.model_copy(update={"flags": [f.split("/", 1)[0] for f in err.flags]})
    flag = err.flags[0] if err.flags else None
    value = err.values[0] if err.values else None
    spec = _resolve(flag, catalog) if flag else None
    valid: list | None = None
    closest: list[str] = []
    if err.kind == "unrecognized_arguments":
        flag, value = _unrecognized(err, w)
    elif err.kind == "invalid_choice":
        valid, closest = _invalid_choice(err, w, spec, flag)
    elif err.kind == "invalid_value":
        _invalid_value(err, w, spec, flag)
    elif err.kind == "expected_argument":
        _expected(err, w, spec, flag)
    elif err.kind == "ambiguous":
        _ambiguous(err, w, flag)
    elif err.kind == "required":
        _required(err, w)
    else:
        w.notes.append(err.message)
    if err.kind not in ("unrecognized_arguments", "required"):
        w.history_flags.extend(err.flags[:1])
        if spec is not None:
            w.line = w.line or _line(spec)
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
        fixed_argv=_fix(w),
        flag_line=w.line,
        parser=scope,
        foreign_sources=w.foreign,
        explanation=f"argparse{_by(scope)} rejected the command: {err.message}{_lead(w)}. "
        + " ".join(n if n.endswith(".") else n + "." for n in w.notes),
    )


def _lead(w: _Work) -> str:
    return f" ({'; '.join(w.leads)})" if w.leads else ""


def _whose(scope: Scope) -> str:
    return "the diffusion server of " if scope == "diffusion" else ""


def _by(scope: Scope) -> str:
    return " (of SGLang's diffusion server)" if scope == "diffusion" else ""


def reparse_problems(argv: list[str], catalog: Catalog) -> list[str]:
    """Unknown tokens and errors left when ``argv`` is parsed again (empty: clean)."""
    parsed = parse_argv(argv, catalog)
    return [*parsed.unknown, *parsed.errors]
