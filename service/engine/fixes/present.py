"""A verified (or undecided) candidate as the answer shows it: :class:`FixOut`, in the
user's own words.

* **Spellings.** An attribute the user set is named as they typed it (``--tp``,
  ``--dp``, ``--dp-size``, an abbreviation), in ``set``, ``remove``, ``edits`` and the
  sentences; one they did not set by the catalog's primary spelling. The corrected
  command keeps their spelling in place (:func:`~service.engine.flags.edit.apply_edits`).
* **edits**: one line per change, read off the command before and after the fix:
  ``- --dp 3`` for a removed flag, ``+ --speculative-num-steps 5`` for an added one, a
  changed value as its ``-`` line then its ``+`` line, switches without a value. When the
  log showed no full command (``command_complete`` false: no model path, no config file;
  :func:`~service.engine.fixes.implied.command_whole`), a flag the fix
  drops that the log did not show (one it assumed) gets its ``-`` line too, and the
  command holds only the flags the log showed.
* **gives_up** / **keeps_features**: the feature flags of the command that the fix does
  not keep with the user's value (:func:`~service.engine.fixes.intent.losses`), as one
  sentence, and whether there are none.
* **verdict**: what static evaluation showed. An undecided candidate says which inputs
  the check reads that are unknown, and that replay decides; a guard flip
  (:func:`~service.engine.fixes.filters.guard_flip`) that it skips the check and is kept
  only if replay accepts it (its origin ends with ``(skips the check)``, its verdict says
  what it turns off: "turns off ..."); rule cards that refused other values of a flag the
  fix sets are cited.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from kb.catalog_types import Catalog
from service.engine.answer import FixOut, jsonable, tri
from service.engine.expr.interpreter import UNKNOWN, Value
from service.engine.fixes.edits import edited_attrs
from service.engine.fixes.filters import SKIP_NOTE
from service.engine.fixes.intent import gives_up_sentence, losses
from service.engine.fixes.model import Verdict
from service.engine.flags.edit import apply_edits, render_command
from service.engine.flags.parse import ParsedArgs, parse_argv

__all__ = ["edit_lines", "fix_out", "recommended_edit", "spelled", "unknown_inputs", "with_bases"]

#: unknown inputs named in an undecided candidate's verdict
_MAX_NAMED = 4


def spelled(attr: str, parsed: ParsedArgs, catalog: Catalog) -> str:
    """``attr`` as the user typed it, else the catalog's primary spelling, else ``attr``."""
    mine = parsed.spelling(attr)
    if mine is not None:
        return mine
    spec = catalog.by_attr().get(attr)
    return spec.flags[0] if spec is not None and spec.flags else attr


def edit_lines(
    attrs: list[str],
    before: ParsedArgs,
    after: ParsedArgs,
    dropped: Mapping[str, str] | None = None,
) -> list[str]:
    """``- old`` / ``+ new`` lines for ``attrs``, from the two parsed command lines.

    ``dropped`` (attribute -> spelling): flags the fix removes although the command as
    logged does not show them (the log showed no full command; the fix assumed them): each
    gets its ``- flag`` line all the same."""
    lines: list[str] = []
    for attr in attrs:
        old, new = before.values.get(attr), after.values.get(attr)
        if old is not None and new is not None and old.raw == new.raw:
            continue
        if old is not None:
            lines.append("- " + shlex.join(old.raw))
        elif dropped and attr in dropped:
            lines.append("- " + dropped[attr])
        if new is not None:
            lines.append("+ " + shlex.join(new.raw))
    return lines


def unknown_inputs(v: Verdict) -> list[str]:
    """The inputs the candidate's evaluation of the check could not decide, in order."""
    names: list[str] = []
    for part in v.evaluation.parts if v.evaluation is not None else []:
        names += [n for n in part.result.unknowns if n not in names]
    return names


def _verdict(v: Verdict, version: str, lost: str) -> str:
    if v.fixes_check is UNKNOWN:
        names = unknown_inputs(v)
        reads = ", ".join(names[:_MAX_NAMED]) + (", ..." if len(names) > _MAX_NAMED else "")
        text = (
            f"undecided statically (the check reads {reads}, unknown here); replay decides"
            if names
            else "undecided statically; replay decides"
        )
    elif v.trips:
        t = v.trips[0]
        text = (
            f"fixes this check, but then {t['function']} at "
            f"{version}:{t['path']}:{t['line']} would fire"
        )
    else:
        extra = (
            f" ({v.unknown_neighbours} related checks undecided)" if v.unknown_neighbours else ""
        )
        text = f"fixes the check; no other check of {version} that reads these flags fires{extra}"
    if v.edit.skips:  # a guard flip: what it turns off, feature flag or not
        text = (
            f"{SKIP_NOTE} rather than fixing it ({v.edit.skips}), kept only if replay "
            f"accepts it; {text}"
        )
    text = "; ".join([text, *v.edit.notes])
    return f"{text}; {lost}" if lost else text


def fix_out(
    rank: int,
    v: Verdict,
    argv: list[str],
    catalog: Catalog,
    parsed: ParsedArgs,
    version: str,
    *,
    prefix: str,
    complete: bool = True,
) -> FixOut:
    """The :class:`FixOut` of ``v`` for the user's ``argv`` (parsed as ``parsed``).

    ``complete``: ``argv`` is the user's whole command. When it is not (the log showed no
    full command), the command shown is marked incomplete and every flag the fix drops has
    its ``-`` line, shown or assumed."""
    edit = v.edit
    new_argv = apply_edits(argv, catalog, set=dict(edit.set), remove=list(edit.remove))
    after = parse_argv(new_argv, catalog)
    touched = list(edit.remove) + [a for a in edit.set if a not in edit.remove]
    lost = gives_up_sentence(losses(dict(edit.set), list(edit.remove), parsed, catalog))
    dropped = None if complete else {a: spelled(a, parsed, catalog) for a in edit.remove}
    return FixOut(
        rank=rank,
        set={spelled(a, parsed, catalog): jsonable(val) for a, val in edit.set.items()},
        remove=[spelled(a, parsed, catalog) for a in edit.remove],
        argv=new_argv,
        command=render_command(new_argv, prefix=prefix),
        command_complete=complete,
        origin=f"{edit.origin} ({SKIP_NOTE})" if edit.skips else edit.origin,
        fixes_check=tri(v.fixes_check),
        trips=v.trips,
        unknown_neighbours=v.unknown_neighbours,
        verdict=_verdict(v, version, lost),
        edits=edit_lines(touched, parsed, after, dropped),
        gives_up=lost,
        keeps_features=not lost,
    )


def with_bases(added: list[FixOut], bases: list[FixOut], fixes: list[FixOut]) -> list[FixOut]:
    """Repaired fixes first (clean, ranked by the rule cards), each followed by the fix it
    extends; then the other fixes in their order; ranks renumbered."""
    out: list[FixOut] = []
    for fix, base in sorted(zip(added, bases, strict=True), key=lambda p: p[0].rank):
        out += [f for f in (fix, base) if all(f is not o for o in out)]
    out += [f for f in sorted(fixes, key=lambda f: f.rank) if all(f is not o for o in out)]
    for i, f in enumerate(out, start=1):
        f.rank = i
    return out


def recommended_edit(
    fixes: list[FixOut],
    pairs: list[tuple[Verdict, FixOut]],
    attrs: dict[str, Value],
    catalog: Catalog,
) -> tuple[str, dict[str, Value]] | None:
    """The recommended fix's edit as typed (``--ep-size 2``) and the attributes after it,
    when the recommended fix is one of ``pairs`` (its verdict and presented fix)."""
    best = next((f for f in fixes if f.recommended), None)
    verdict = next((v for v, f in pairs if f is best), None)
    if best is None or verdict is None:
        return None
    typed = " ".join([*(f"{k} {v}" for k, v in best.set.items()), *best.remove])
    return typed, edited_attrs(attrs, verdict.edit, catalog)
