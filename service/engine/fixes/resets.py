"""Flags SGLang resets before the check: keep the user's value by failing the reset's guard.

A user sets ``--enable-dp-attention``, as the message asks; SGLang's own resolution sets
it back to ``False`` when ``dp_size == 1`` (0.5.21, ``_data_parallelism_defaults``), and
the check fires again. Dropping or toggling the flag cannot help: the user's value is
not what the check reads. What helps is making the write's guard false, so that the
value the user gave reaches the check: ``--dp-size 2``.

:func:`reset_edits` finds, in the check's evaluation, each flag the user set whose value
at the check came from a write (its provenance names the write's ``path:line``), takes
that write from the fold plan and proposes, for every other flag its guards compare with
a constant, the constants that change the comparison (as
:func:`~service.engine.fixes.edits.candidate_edits` does for the check's own condition).
Each candidate is judged like any other: the check, then its neighbours.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.evaluate.fold import fold_plan
from service.engine.evaluate.guard_memo import sorted_reads
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.expr.interpreter import UNKNOWN, Value
from service.engine.fixes.model import Edit
from service.engine.flags.parse import ParsedArgs

__all__ = ["ORIGIN", "reset_edits"]

#: how a candidate from here starts its ``origin``
ORIGIN = "keep the value given to "
#: candidates proposed per reset flag
MAX_PER_FLAG = 4


def _reset(ev: PathEvaluation, parsed: ParsedArgs) -> dict[str, str]:
    """Attribute the user set -> the provenance detail of the write whose value the check
    read in its place."""
    out: dict[str, str] = {}
    for part in ev.parts:
        for atom in part.result.atoms:
            for name, _value, prov in atom.inputs:
                if name in parsed.values and prov.kind == "write" and name not in out:
                    out[name] = prov.detail
    return out


def reset_edits(
    store: Store,
    version: str,
    check: Check,
    ev: PathEvaluation,
    parsed: ParsedArgs,
    catalog: Catalog,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    constants_for: Callable[[str, list[str]], list[object]],
) -> list[Edit]:
    """Candidate edits failing the guard of each write that replaced a value the user set
    before ``check`` (module docstring). ``constants_for(attr, conditions)``: the constants
    ``attr`` is compared with in ``conditions``."""
    reset = _reset(ev, parsed)
    if not reset:
        return []
    by_attr = catalog.by_attr()
    plan, _ = fold_plan(store, version, check, frozenset(reset), facts.keys())
    out: list[Edit] = []
    for w, pw in plan:
        detail = reset.get(w.attr)
        if detail is None or not re.search(rf"{re.escape(f'{w.path}:{w.line}')}(?!\d)", detail):
            continue
        spelled = parsed.spelling(w.attr) or w.attr
        same_fn = w.function == check.function and w.path == check.path
        conditions = [cond for cond, _ in pw.all_guards(same_fn)]
        found: list[Edit] = []
        for cond in conditions:
            for name in sorted_reads(cond) or ():
                if name == w.attr or name not in by_attr:
                    continue
                current = attrs[name].value if name in attrs else UNKNOWN
                for v in constants_for(name, [cond]):
                    if v != current and v is not None:
                        found.append(
                            Edit(
                                set={name: v},
                                origin=f"{ORIGIN}{spelled}: SGLang resets it at "
                                f"{w.path}:{w.line} when {cond}",
                            )
                        )
        out += found[:MAX_PER_FLAG]
    return out
