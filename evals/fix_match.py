"""Does a proposed fix equal an acceptable one? (the ``fix_match`` metric, :mod:`evals.scoring`)

Flags are compared as attributes (:func:`flag_attr`: any spelling of a flag names its
attribute in the release's catalog) and values after normalisation (booleans, numbers
and their text compare alike). An edit equal to the acceptable one matches; so does a fix
whose command line, once parsed, has the same effect as the acceptable edit applied to
the incident's command. ``within`` ranges accept any number in the range for a flag.
"""

from __future__ import annotations

from typing import Any

from evals.incidents import FixSpec
from kb.catalog_types import Catalog
from service.engine import apply_edits, parse_argv

__all__ = ["fix_matches", "flag_attr"]


def flag_attr(flag: str, catalog: Catalog | None) -> str:
    """The attribute ``flag`` (a spelling, maybe ``--x=value``, or an attribute) names in
    ``catalog``; the flag itself without a catalog or when the catalog does not know it."""
    if catalog is None:
        return flag
    spec = catalog.by_flag().get(flag.split("=", 1)[0])
    if spec is not None:
        return spec.attr
    if flag in catalog.by_attr():
        return flag
    return flag


def _norm_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(float(value))
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        return repr(float(text))
    except ValueError:
        return text


def _edit_key(
    set_: dict[str, Any], remove: list[str], catalog: Catalog | None
) -> tuple[frozenset[tuple[str, str]], frozenset[str]]:
    return (
        frozenset((flag_attr(k, catalog), _norm_value(v)) for k, v in set_.items()),
        frozenset(flag_attr(r, catalog) for r in remove),
    )


def _effect(argv: list[str], catalog: Catalog) -> tuple[Any, ...]:
    parsed = parse_argv(argv, catalog)
    return (
        tuple(sorted((a, _norm_value(pf.value)) for a, pf in parsed.values.items())),
        tuple(sorted(parsed.unknown)),
    )


def fix_matches(
    fix: dict[str, Any],
    acceptable: FixSpec,
    command: list[str],
    catalog: Catalog | None,
    *,
    real: list[str] | None = None,
) -> bool:
    """Does ``fix`` (set/remove, maybe argv) equal the acceptable edit? With ``within``
    ranges, the fix must set each ranged flag to a number in its range and otherwise make
    exactly the acceptable edit.

    ``real`` is the command the crashed launch really ran, when the answer did not see it
    (a variant without the command line): the fix is then judged as an edit of that command,
    so setting a flag to the value it already had there is no edit."""
    if real and catalog is not None:
        fix = _relative_to(fix, real, catalog)
        command = real
    if acceptable.within:
        return _within(fix, acceptable, catalog)
    if _edit_key(fix.get("set") or {}, fix.get("remove") or [], catalog) == _edit_key(
        acceptable.set, acceptable.remove, catalog
    ):
        return True
    if catalog is None or not command or not fix.get("argv"):
        return False
    try:
        wanted = apply_edits(
            command, catalog, set=dict(acceptable.set), remove=list(acceptable.remove)
        )
    except KeyError:
        return False
    before = _effect(command, catalog)
    after = _effect(wanted, catalog)
    return after != before and after == _effect(list(fix["argv"]), catalog)


def _relative_to(fix: dict[str, Any], real: list[str], catalog: Catalog) -> dict[str, Any]:
    """``fix`` as an edit of ``real``: its ``argv`` is ``real`` edited, a flag set to the value
    ``real`` gives it is left out, and so is a removal of a flag ``real`` does not set."""
    had = parse_argv(real, catalog).values
    set_ = {
        k: v
        for k, v in (fix.get("set") or {}).items()
        if flag_attr(k, catalog) not in had
        or _norm_value(had[flag_attr(k, catalog)].value) != _norm_value(v)
    }
    remove = [r for r in fix.get("remove") or [] if flag_attr(r, catalog) in had]
    try:
        argv = apply_edits(real, catalog, set=set_, remove=remove)
    except (KeyError, ValueError):
        argv = list(fix.get("argv") or [])
    return {**fix, "set": set_, "remove": remove, "argv": argv}


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _within(fix: dict[str, Any], acceptable: FixSpec, catalog: Catalog | None) -> bool:
    set_ = dict(fix.get("set") or {})
    ranged = {flag_attr(k, catalog): bounds for k, bounds in acceptable.within.items()}
    rest = {k: v for k, v in set_.items() if flag_attr(k, catalog) not in ranged}
    hit = {
        flag_attr(k, catalog): _number(v)
        for k, v in set_.items()
        if flag_attr(k, catalog) in ranged
    }
    if set(hit) != set(ranged):
        return False
    if any(v is None or not lo <= v <= hi for (lo, hi), v in ((ranged[a], hit[a]) for a in ranged)):
        return False
    return _edit_key(rest, fix.get("remove") or [], catalog) == _edit_key(
        acceptable.set, acceptable.remove, catalog
    )
