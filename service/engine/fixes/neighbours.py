"""Phase 2 of the fix verifier: the other checks of the release that an edit would make
fire (:func:`recheck_neighbours`), among the checks that read an edited attribute
(:func:`neighbours`: the rest of the function, its neighbours in the validation files).

Speed: the neighbours of a check are found without SQL per request (candidate
rows read once per release and file, matched per attribute name as SQL
``LIKE`` would); a neighbour's verdict is memoised on the values its pieces
read and the facts, and a whole re-check on the values all neighbours read.
Every table is bounded and thread-safe (:mod:`service.engine.cache`); answers are those of
the uncached computation.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.cache import LRUCache, facts_signature, release_key
from service.engine.evaluate.memo_keys import value_key
from service.engine.evaluate.path_condition import evaluate_path, path_fires, prepared_pieces
from service.engine.expr.interpreter import UNKNOWN, Value
from service.engine.expr.trace import Reads, reads_match, shared_answers, values_only
from service.engine.fixes.edits import edited_attrs
from service.engine.fixes.model import Verdict

MAX_NEIGHBOURS = 150

# (release key, file) -> neighbour candidate rows and their raw condition/guards text
_NEIGHBOUR_ROWS: LRUCache[tuple[list[Check], list[tuple[str | None, str | None]]]] = LRUCache(
    "fixes.neighbour_rows", 64
)
# ((release key, file), attr) -> indexes of the candidate rows that mention attr
_ATTR_ROWS: LRUCache[frozenset[int]] = LRUCache("fixes.attr_rows", 8192)
# (release key, the facts' keys, (check id, values read)) -> the check's verdict without
# earlier writes, per way the facts answered what its evaluation asked them (by value: a
# verdict shows no fact's origin)
_FIRED: LRUCache[tuple[tuple[Reads, object], ...]] = LRUCache("fixes.neighbour_fired", 50_000)
_FIRED_VARIANTS = 8
# (release key, check, touched attrs, facts) -> its neighbours and what they read
_PLANS: LRUCache[_NeighbourPlan] = LRUCache("fixes.neighbour_plans", 2048)
# (release key, facts, check, touched attrs, values the neighbours read) -> (trips, unknown count)
_RECHECKS: LRUCache[tuple[tuple[dict[str, Any], ...], int]] = LRUCache("fixes.rechecks", 5_000)


def neighbours(store: Store, version: str, check: Check, attrs: set[str]) -> list[Check]:
    """Other checks of the validation files that read any of ``attrs``.

    The checks of ``check``'s file and of ``arg_groups/`` whose condition or
    guards contain an attribute name, as SQL ``LIKE '%name%'`` matches it
    (``_`` any one character, ASCII case folded), in file and line order. The
    candidate rows are read once per release and file, and which of them
    mention a name once per name (both cached), so a triage runs no query here.
    Rows are shared: read-only.
    """
    if not attrs:
        return []
    rkey = release_key(store, version, f"neighbours:{check.path}")
    rows, texts = _NEIGHBOUR_ROWS.get_or_build(rkey, lambda: _candidate_rows(store, version, check))
    hit: set[int] = set()
    for attr in attrs:
        hit |= _ATTR_ROWS.get_or_build(
            (rkey, attr), functools.partial(_rows_mentioning, texts, attr)
        )
    return [rows[i] for i in sorted(hit) if rows[i].id != check.id][:MAX_NEIGHBOURS]


def _candidate_rows(
    store: Store, version: str, check: Check
) -> tuple[list[Check], list[tuple[str | None, str | None]]]:
    """Checks of ``check``'s file and of ``arg_groups/`` with their raw condition/guards text."""
    where = "(path = ? OR path LIKE ?)"
    params = [check.path, "sglang/srt/arg_groups/%"]
    rows = store.checks(version, where=where, params=params)
    raw = {
        r["id"]: (r["condition"], r["guards"])
        for r in store.query(
            f"SELECT id, condition, guards FROM checks WHERE release = ? AND {where}",
            [version, *params],
        )
    }
    return rows, [raw.get(r.id, (None, None)) for r in rows]


def _like_pattern(text: str) -> re.Pattern[str]:
    """SQLite's ``LIKE '%text%'``: ``_`` one character, ``%`` any run, ASCII case-insensitive."""
    body = "".join("." if c == "_" else ".*" if c == "%" else re.escape(c) for c in text)
    return re.compile(body, re.IGNORECASE | re.ASCII | re.DOTALL)


def _rows_mentioning(texts: list[tuple[str | None, str | None]], attr: str) -> frozenset[int]:
    pat = _like_pattern(attr)
    return frozenset(
        i
        for i, (cond, guards) in enumerate(texts)
        if (cond is not None and pat.search(cond)) or (guards is not None and pat.search(guards))
    )


def recheck_neighbours(
    store: Store,
    version: str,
    check: Check,
    verdict: Verdict,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    catalog: Catalog,
    memo: dict[tuple[Any, ...], object] | None = None,
    *,
    facts_sig: str | None = None,
) -> None:
    """Phase 2: record the other checks that ``verdict.edit`` would make fire.

    Without earlier writes a neighbour's verdict depends only on the values of
    the attributes its pieces read and on the facts, so it is memoised on them:
    in ``memo`` (one per triage) and process-wide (bounded, thread-safe). The
    whole re-check is memoised too, on the values of every attribute the
    neighbours read. A neighbour found firing so is then evaluated with its earlier
    writes folded in, and counts as a trip only if it still fires (undecided if that
    evaluation cannot tell).
    """
    edit = verdict.edit
    new_attrs = edited_attrs(attrs, edit, catalog)
    touched = frozenset(edit.set) | frozenset(edit.remove)
    memo = memo if memo is not None else {}
    fact_names = frozenset(facts)
    fsig = facts_sig or facts_signature(facts)
    rkey = release_key(store, version, "neighbour-fired")
    plan = _neighbour_plan(store, version, check, touched, fact_names)
    values = {n: value_key(new_attrs.get(n)) for n in plan.names}
    whole = (rkey, fsig, check.id, touched, tuple(values[n] for n in plan.names))
    hit = _RECHECKS.get(whole)

    sigs = shared_answers(fsig)  # the facts' answers, for reads_match

    def fired_of(row: Check, key: tuple[Any, ...]) -> object:
        """Whether ``row`` fires with the edited attributes, its earlier writes unapplied
        (the pieces' texts depend on which facts exist: keyed on their keys)."""
        full = (rkey, fact_names, key)
        variants = _FIRED.get(full) or ()
        for reads, fired in variants:
            if reads_match(reads, facts, sigs):
                return fired
        fired, reads = path_fires(store, version, row, new_attrs, facts, fact_names, sigs)
        _FIRED.put(full, (*variants, (values_only(reads), fired))[-_FIRED_VARIANTS:])
        return fired

    if hit is None:
        trips: list[dict[str, Any]] = []
        unknown = 0
        for other, names in plan.rows:
            key = (other.id, tuple((n, values[n]) for n in names))
            if key not in memo:
                memo[key] = fired_of(other, key)
            fired = memo[key]
            if fired is True:
                trips.append(
                    {
                        "id": other.id,
                        "path": other.path,
                        "function": other.function,
                        "line": other.start_line,
                        "message": other.message,
                        "condition": other.condition,
                    }
                )
            elif fired is UNKNOWN:
                unknown += 1
        hit = (tuple(trips), unknown)
        _RECHECKS.put(whole, hit)
    # a neighbour that fires on the values as given is confirmed with the earlier writes
    # folded in: SGLang may resolve what it reads first (``device`` None becomes the
    # machine's before ``cfg.device != "cuda"`` is asked)
    rows = {other.id: other for other, _ in plan.rows}
    unknown = hit[1]
    for t in hit[0]:
        fired = evaluate_path(store, version, rows[t["id"]], new_attrs, facts, facts_sig=fsig).fired
        if fired is True:
            verdict.trips.append(dict(t))
        elif fired is UNKNOWN:
            unknown += 1
    verdict.unknown_neighbours += unknown


@dataclass(frozen=True)
class _NeighbourPlan:
    rows: tuple[tuple[Check, tuple[str, ...]], ...]  # (neighbour, attributes it reads)
    names: tuple[str, ...]  # every attribute any neighbour reads, sorted


def _neighbour_plan(
    store: Store,
    version: str,
    check: Check,
    touched: frozenset[str],
    fact_names: frozenset[str],
) -> _NeighbourPlan:
    """The neighbours for ``touched`` with the sorted attributes each reads (cached)."""

    def build() -> _NeighbourPlan:
        rows = tuple(
            (o, tuple(sorted(prepared_pieces(store, version, o, fact_names)[1])))
            for o in neighbours(store, version, check, set(touched))
        )
        return _NeighbourPlan(rows, tuple(sorted({n for _, names in rows for n in names})))

    key = (*release_key(store, version, "neighbour-plan"), check.id, touched, fact_names)
    return _PLANS.get_or_build(key, build)
