"""Each validation check of a release as the conditions of a rule card (:class:`DerivedCheck`).

For each ``assert``/``raise`` in the validation surface (``sglang/srt/server_args.py``
and ``sglang/srt/arg_groups/``):

* ``when`` is the AND of the function's reach condition (call sites across the
  surface, see :mod:`service.engine.rules.callsites`) and the check's guards, each negated where its
  polarity is false (``else`` branches, early exits);
* ``require`` is the assert's test. A ``raise`` has no test: its innermost guard
  is what decides it, so ``require`` is ``not (<innermost guard>)`` and ``when``
  holds the outer guards only. (The alternative, ``when`` = all guards and
  ``require`` = ``False``, would make every such card read as "never allowed"
  and would give the lint nothing to aim a fix at.) A raise with no guard of its
  own is skipped: reaching it is the whole condition.

Local variables are substituted by the expressions assigned to them earlier in
the function (``model_arch`` stays a fact), then conditions are normalised with
:func:`~service.engine.expr.interpreter.normalize` (``self.X``/``cfg.X``/
``server_args.X``/``resolved_view(server_args).X`` -> ``args.X``). Only checks
whose normalised conditions read at least one public ``args.X`` (internal
``_state`` fields do not count) and pass the evaluator's whitelist become cards;
bare re-raises inside ``except`` blocks are not checks and are skipped.

:mod:`service.engine.rules.derive` turns them into cards, one per distinct
``(when, require)``.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from kb.code_types import Check
from kb.errors import UnsafeExpression
from kb.rules.cards import helper_reads
from kb.store import Store
from service.engine.evaluate import chain
from service.engine.evaluate.path_condition import fold_plan
from service.engine.expr.interpreter import normalize, referenced_names, validate
from service.engine.rules.callsites import ARG_OBJECTS, reach_condition, with_locals

__all__ = ["DerivedCheck", "derive_release", "qualifying_checks"]


@dataclass(frozen=True)
class DerivedCheck:
    """One qualifying check of one release, with its normalised card conditions."""

    when: str
    require: str
    release: str
    citation: str
    check_id: int
    kind: str
    function: str
    path: str
    start: int
    end: int
    bare: bool
    message: str | None
    reads: frozenset[str] = frozenset()
    deps: tuple[str, ...] = ()  # reads + what the earlier writes folded in for them read
    writes: bool = False  # does any earlier write of a read attribute exist?


@functools.lru_cache(maxsize=32768)
def _piece(text: str) -> tuple[str, frozenset[str], bool] | None:
    """(normalised text, attributes read, needs parentheses under ``and``) or None if refused."""
    try:
        out = normalize(text, ARG_OBJECTS)
        validate(out)
        node = ast.parse(out, mode="eval").body
    except (UnsafeExpression, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    loose = isinstance(node, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda))
    return out, referenced_names(out), loose


def _conj(pieces: list[tuple[str, bool]]) -> tuple[str, frozenset[str]] | None:
    """AND of (condition, polarity) pieces, normalised piece by piece (cached per piece)."""
    parts: list[str] = []
    reads: frozenset[str] = frozenset()
    for text, polarity in pieces:
        got = _piece(text)
        if got is None:
            return None
        out, names, loose = got
        reads |= names
        if polarity:
            parts.append(f"({out})" if loose and len(pieces) > 1 else out)
        else:
            inner = _piece(f"not ({text})")
            if inner is None:
                return None
            parts.append(f"({inner[0]})" if inner[2] and len(pieces) > 1 else inner[0])
    return (" and ".join(parts) if parts else "True"), reads


def _derive_check(store: Store, version: str, row: Check) -> DerivedCheck | None:
    fns = store.functions_at(version, row.path, row.start_line)
    fn_start = fns[0]["start_line"] if fns else None

    def local(text: str) -> str:
        return with_locals(store, version, row.path, fn_start, row.start_line, text)

    pieces: list[tuple[str, bool]] = []
    reach = reach_condition(store, version, row.function)
    if reach is not None:
        pieces.append((reach, True))
    guards = row.guards
    if row.kind == "assert" and row.condition:
        pieces += [(local(g["condition"]), bool(g["polarity"])) for g in guards]
        require = [(local(row.condition), True)]
    else:
        if not guards or not (row.exc_type or row.message):
            return None  # unguarded, or a bare re-raise inside an ``except``
        pieces += [(local(g["condition"]), bool(g["polarity"])) for g in guards[:-1]]
        require = [(local(guards[-1]["condition"]), not guards[-1]["polarity"])]
    when = _conj(pieces)
    req = _conj(require)
    if when is None or req is None or not any(not n.startswith("_") for n in when[1] | req[1]):
        return None  # reads no (public) argument attribute
    try:
        validate(when[0])
    except UnsafeExpression:
        return None  # too large for the evaluator as a whole
    start, end = row.start_line, row.end_line
    span = f"{start}-{end}" if end != start else str(start)
    reads = when[1] | req[1]
    deps, writes = _write_deps(store, version, row, reads)
    return DerivedCheck(
        when[0],
        req[0],
        version,
        f"{version}:{row.path}:{row.function}:{span}",
        row.id,
        row.kind,
        row.function,
        row.path,
        start,
        end,
        bool(row.bare),
        row.message,
        reads,
        tuple(sorted(deps | helper_reads(when[0], req[0]))),
        writes,
    )


def _write_deps(
    store: Store, version: str, row: Check, reads: frozenset[str]
) -> tuple[set[str], bool]:
    """(attributes the earlier writes of ``reads`` depend on, any such write?).

    The same fold plan the checker folds in (:func:`~service.engine.evaluate.path_condition.
    fold_plan`: ``self.x = ...`` writes, resolution declarations, inlined helpers), so a
    card's memo key covers everything its verdict can read."""
    plan, names = fold_plan(store, version, row, frozenset(reads))
    deps = set(reads) | set(names)
    for w in (w for attr in reads for w in chain.earlier_writes(store, version, attr, row)):
        for text in [*(g["condition"] for g in w.guards), w.value or "None"]:
            try:
                deps |= referenced_names(text)
            except Exception:  # unparsable: only the attribute itself
                continue
    return deps, bool(plan) or any(
        chain.earlier_writes(store, version, attr, row) for attr in reads
    )


def qualifying_checks(store: Store, version: str) -> list[Check]:
    """The checks of ``version``'s validation surface (the candidates for derivation)."""
    return store.checks(
        version,
        where="path = ? OR path LIKE ?",
        params=["sglang/srt/server_args.py", "sglang/srt/arg_groups/%"],
    )


def derive_release(store: Store, version: str) -> list[DerivedCheck]:
    """Every qualifying check of ``version`` that yields a card, in source order."""
    out: list[DerivedCheck] = []
    for row in qualifying_checks(store, version):
        d = _derive_check(store, version, row)
        if d is not None:
            out.append(d)
    return out
