"""The answer to ``unrecognized arguments``: for each flag argparse refused, whether it is

* a spelling of the release after all (of the parser that ran or of the other one;
  :func:`~service.engine.locate.argparse.foreign.known_here`),
* another engine's flag (:func:`~service.engine.locate.argparse.foreign.foreign_answer`),
* a misspelling or an old name of an option (renamed, ``_`` for ``-``, a typo): then the edit
  renames it, keeping its value or dropping one a switch does not take,
* or an option of no release near it: then the edit removes it;

and the stray values no option took (``true`` after a ``store_true`` flag).
"""

from __future__ import annotations

from typing import Any

from kb.catalog_types import Catalog, FlagSpec
from service.engine.flags.parse import suggest_flag
from service.engine.flags.scan import normalise_flag
from service.engine.locate.argparse.foreign import foreign_answer, known_here
from service.engine.locate.argparse.words import (
    adjacent_values,
    choice_value,
    declaration_line,
    describe_spec,
    resolve_spelling,
    typo_of,
    unrecognized_groups,
)
from service.engine.locate.argparse.work import Work
from service.engine.locate.flag_history import FlagHistory, Scope, flag_history
from service.engine.logparse.argparse_errors import ArgparseError

__all__ = ["unrecognized_arguments"]

_FALSE_WORDS = frozenset({"false", "0", "no", "n", "off", "none"})


def unrecognized_arguments(err: ArgparseError, w: Work) -> tuple[str | None, str | None]:
    """Answer each flag and stray value of ``err`` into ``w``; (the first flag, its first value)."""
    first_flag: str | None = None
    first_value: str | None = None
    for flag, values in unrecognized_groups(err.message):
        if flag is None:
            _stray(values, w)
            continue
        if w.argv is not None:
            values, stray = adjacent_values(w.argv, flag, values)
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
            normalise_flag(flag) not in w.catalog.by_flag()
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
        w.line = w.line or declaration_line(spec)
        edit, note = _rename_edit(flag, target, spec, values)
        if "_" in flag and target == normalise_flag(flag):
            w.leads.append(f"SGLang spells it {target}")
            note += (
                f"; argparse matches option strings exactly, and SGLang {w.release} spells "
                "its options with dashes"
                + ("" if any("_" in f for f in w.catalog.by_flag()) else " only")
            )
        w.edits.append(edit)
        w.notes.append(note)
    return first_flag, first_value


def _known(flag: str, note: str, spec: FlagSpec | None, w: Work) -> None:
    """Answer a flag that is a spelling of either parser of the release (``spec``: of the
    parser that ran; see :func:`~service.engine.locate.argparse.foreign.known_here`)."""
    w.history_flags.append(flag)
    scope = w.scope if spec is not None else ("diffusion" if w.scope == "llm" else "llm")
    w.leads.append(
        f"{flag} is an option of SGLang {w.release}'s "
        f"{'LLM' if scope == 'llm' else 'diffusion'} server"
    )
    if spec is not None:
        w.line = w.line or declaration_line(spec)
        w.notes.append(note)
    else:
        w.edits.append({"remove": [flag]})
        w.notes.append(note + "; remove it")


def _foreign(flag: str, values: list[str], w: Work) -> bool:
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
    norm = normalise_flag(flag)
    if norm in by_flag:
        return norm
    if hist.renamed_to is not None:
        return hist.renamed_to
    if suggestions and not hist.present_in and typo_of(norm, suggestions[0]):
        return suggestions[0]
    return None


def _rename_edit(
    flag: str, target: str, spec: FlagSpec, values: list[str]
) -> tuple[dict[str, Any], str]:
    why = (
        f"{flag} is not a spelling argparse knows in this release; "
        f"the option is {target} ({describe_spec(spec)})"
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
        else choice_value(spec, values[0])
    )
    return {"remove": [flag], "set": {target: value}}, why + "; rename it keeping the value"


def _stray(values: list[str], w: Work) -> None:
    """Value tokens argparse could not attach to any option."""
    where = ""
    if w.argv is not None:
        for v in values:
            if v in w.argv:
                i = w.argv.index(v)
                prev = w.argv[i - 1] if i > 0 else ""
                spec = resolve_spelling(prev, w.catalog) if prev and prev.startswith("-") else None
                if spec is not None and not spec.takes_value:
                    where = f"; {prev} is a switch ({spec.action}) and takes no value"
                    w.line = w.line or declaration_line(spec)
                    w.history_flags.append(prev)
                elif spec is not None:
                    where = f"; {prev} already took its value(s) ({describe_spec(spec)})"
                break
    w.edits.append({"drop": list(values)})
    w.notes.append(f"stray value(s) {' '.join(values)} belong to no option{where}")


def _whose(scope: Scope) -> str:
    return "the diffusion server of " if scope == "diffusion" else ""
