"""Candidate flag fixes: minimal edits that make the failing path condition false.

Candidates come from the condition itself, never from a list of known answers:

* dropping flags the user set that the condition reads (alone, in pairs, in
  threes);
* setting an attribute to a constant the condition compares it with, to one
  of the flag's choices, or toggling a boolean flag;
* "what SGLang would choose": when the check's own function assigns the
  attributes right after the check (``(steps, topk, draft) =
  auto_choose_speculative_params(self)``), the values that call returns for
  these flags and facts, set explicitly together.

Each candidate is re-evaluated: the check must become definitely false. Then
it is re-checked against the other checks of the release that read an edited
attribute (the rest of the function, its neighbours in the validation files);
a candidate that makes another check fire is demoted and says which. Ranking:
verified-clean first, then fewer edits, removals before additions.

Speed: the neighbours of a check are found without SQL per request (candidate
rows read once per release and file, matched per attribute name as SQL
``LIKE`` would); a neighbour's verdict is memoised on the values its pieces
read and the facts, and a whole re-check on the values all neighbours read.
Every table is bounded and thread-safe (:mod:`service.engine.cache`); answers are those of
the uncached computation.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from kb.catalog_types import Catalog
from kb.store import Store
from service.engine.cache import LRUCache, cached, facts_signature, release_key
from service.engine.evaluate import chain
from service.engine.evaluate.path_condition import (
    PathEvaluation,
    evaluate_path,
    prepared_pieces,
    value_key,
)
from service.engine.evaluate.symbolic import call_value
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Value
from service.engine.flags.parse import ParsedArgs

MAX_CANDIDATES = 40
MAX_NEIGHBOURS = 150
RECHECK_SPARE = 5
_NEVER_DROP = frozenset({"model_path"})  # candidates re-checked beyond the number returned

# (release key, file) -> neighbour candidate rows and their raw condition/guards text
_NEIGHBOUR_ROWS: LRUCache[tuple[list[dict[str, Any]], list[tuple[str | None, str | None]]]] = \
    LRUCache("fixes.neighbour_rows", 64)
# ((release key, file), attr) -> indexes of the candidate rows that mention attr
_ATTR_ROWS: LRUCache[frozenset[int]] = LRUCache("fixes.attr_rows", 8192)
# (release key, facts, (check id, values read)) -> the check's verdict without earlier writes
_FIRED: LRUCache[object] = LRUCache("fixes.neighbour_fired", 50_000)
# (release key, check, touched attrs, facts) -> its neighbours and what they read
_PLANS: LRUCache[_NeighbourPlan] = LRUCache("fixes.neighbour_plans", 2048)
# (release key, facts, check, touched attrs, values the neighbours read) -> (trips, unknown count)
_RECHECKS: LRUCache[tuple[tuple[dict[str, Any], ...], int]] = LRUCache("fixes.rechecks", 5_000)


@dataclass
class Edit:
    set: dict[str, object] = field(default_factory=dict)  # attr -> value
    remove: list[str] = field(default_factory=list)  # attrs
    origin: str = ""

    def key(self) -> tuple[Any, ...]:
        return (tuple(sorted((k, repr(v)) for k, v in self.set.items())), tuple(sorted(self.remove)))

    def size(self) -> int:
        return len(self.set) + len(self.remove)


@dataclass
class Verdict:
    edit: Edit
    fixes_check: object  # True / False / UNKNOWN
    trips: list[dict[str, Any]] = field(default_factory=list)  # checks that would fire instead
    unknown_neighbours: int = 0
    evaluation: PathEvaluation | None = None

    @property
    def ok(self) -> bool:
        return self.fixes_check is True and not self.trips


@functools.lru_cache(maxsize=4096)
def _condition_tree(text: str) -> ast.Expression | None:
    """The parsed condition (cached; callers must not modify it), None if it does not parse."""
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None


def _constants_for(attr: str, conditions: list[str]) -> list[object]:
    """Constants that ``attr`` is compared with in ``conditions`` (a fresh list)."""
    return list(_constants(attr, tuple(conditions)))


@functools.lru_cache(maxsize=4096)
def _constants(attr: str, conditions: tuple[str, ...]) -> tuple[object, ...]:
    values: list[object] = []

    def refers(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == attr

    for text in conditions:
        tree = _condition_tree(text)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if not any(refers(s) for s in sides):
                continue
            for side in sides:
                if isinstance(side, ast.Constant) and side.value is not None:
                    values.append(side.value)
                    if isinstance(side.value, int) and not isinstance(side.value, bool):
                        values.extend([side.value + 1, side.value - 1])
                elif isinstance(side, ast.Tuple | ast.List | ast.Set):
                    values.extend(e.value for e in side.elts if isinstance(e, ast.Constant))
    out: list[object] = []
    for v in values:
        if v not in out:
            out.append(v)
    return tuple(out[:8])


def _choice_sites(store: Store, version: str, check: dict[str, Any]) -> list[tuple[list[str], str]]:
    """Assignments from a call within 12 lines after ``check`` in its function:
    (attributes assigned, call source), in ``ast.walk`` order (cached per release and check)."""

    def build() -> list[tuple[list[str], str]]:
        fn_rows = store.functions_at(version, check["path"], check["start_line"])
        if not fn_rows:
            return []
        node = chain.function_ast(store, version, fn_rows[0])
        if node is None:
            return []
        offset = fn_rows[0]["start_line"] - 1
        sites: list[tuple[list[str], str]] = []
        for stmt in ast.walk(node):
            if not isinstance(stmt, ast.Assign) or stmt.lineno + offset <= check["end_line"]:
                continue
            if stmt.lineno + offset > check["end_line"] + 12:
                continue
            target = stmt.targets[0]
            names = [e.attr for e in (target.elts if isinstance(target, ast.Tuple) else [target])
                     if isinstance(e, ast.Attribute)]
            if not names or not isinstance(stmt.value, ast.Call):
                continue
            sites.append((names, ast.unparse(stmt.value)))
        return sites

    return cached(release_key(store, version, f"choice-sites:{check['id']}"), build)


def _sglang_choice(store: Store, version: str, check: dict[str, Any], attrs: dict[str, Value],
                   facts: dict[str, Value]) -> dict[str, object]:
    """Values the check's function assigns right after it, as SGLang would compute them."""
    env = Env(attrs, facts)
    for names, call in _choice_sites(store, version, check):
        value = call_value(store, version, call, env)
        if value is UNKNOWN:
            continue
        if len(names) == 1:
            return {names[0]: value}
        if isinstance(value, tuple | list) and len(value) == len(names):
            return dict(zip(names, value, strict=True))
    return {}


def candidate_edits(store: Store, version: str, check: dict[str, Any], ev: PathEvaluation,
                    parsed: ParsedArgs, catalog: Catalog, attrs: dict[str, Value],
                    facts: dict[str, Value]) -> list[Edit]:
    by_attr = catalog.by_attr()
    conditions = [p.condition for p in ev.parts]
    # a required flag (the model path) is never dropped: no launch works without it
    user_set = [a for a in sorted(ev.attrs) if a in parsed.values
                and not (a in by_attr and by_attr[a].required) and a not in _NEVER_DROP]
    edits: list[Edit] = []
    for n in (1, 2, 3):
        for combo in itertools.combinations(user_set, n):
            edits.append(Edit(remove=list(combo), origin="drop flags the check reads"))
    choice = _sglang_choice(store, version, check, attrs, facts)
    if choice and all(a in by_attr for a in choice):
        edits.append(Edit(set=dict(choice), origin="set explicitly what SGLang would choose"))
    for attr in sorted(ev.attrs):
        spec = by_attr.get(attr)
        if spec is None:
            continue
        current = attrs.get(attr, Value(UNKNOWN, Provenance("unknown"))).value
        if spec.action in ("store_true", "store_false"):
            edits.append(Edit(set={attr: not bool(current) if current is not UNKNOWN else True},
                              origin="toggle"))
            continue
        values = _constants_for(attr, conditions)
        values += [c for c in (spec.choices or [])[:8] if c not in values]
        for v in values:
            if v != current:
                edits.append(Edit(set={attr: v}, origin="a value the check accepts"))
    unique: dict[tuple[Any, ...], Edit] = {}
    for e in edits:
        unique.setdefault(e.key(), e)
    return list(unique.values())[: MAX_CANDIDATES * 3]


def edited_attrs(attrs: dict[str, Value], edit: Edit, catalog: Catalog) -> dict[str, Value]:
    new = dict(attrs)
    defaults = _last_spec_by_attr(catalog)
    for attr in edit.remove:
        spec = defaults.get(attr)
        decl = catalog.declaration(attr)
        if decl is not None and decl.default_known:
            new[attr] = Value(decl.default, Provenance("default", f"default {decl.default!r} "
                                                       f"({decl.path}:{decl.line}) after the fix"))
        elif spec is not None and spec.default_known:
            new[attr] = Value(spec.default, Provenance("default", f"default {spec.default!r}"))
        else:
            new[attr] = Value(UNKNOWN, Provenance("unknown", "default not known statically"))
    for attr, value in edit.set.items():
        new[attr] = Value(value, Provenance("flag", f"set by the fix to {value!r}"))
    return new


def _last_spec_by_attr(catalog: Catalog) -> dict[str, Any]:
    """attr -> the last flag spec writing it (once per read-only KB catalog; not to be modified)."""
    def build() -> dict[str, Any]:
        return {s.attr: s for s in catalog.flags}

    catalog_cached = getattr(catalog, "cached", None)
    return catalog_cached("fixes:last_spec", build) if catalog_cached is not None else build()


def neighbours(store: Store, version: str, check: dict[str, Any], attrs: set[str]) -> list[dict[str, Any]]:
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
    rkey = release_key(store, version, f"neighbours:{check['path']}")
    rows, texts = _NEIGHBOUR_ROWS.get_or_build(rkey, lambda: _candidate_rows(store, version, check))
    hit: set[int] = set()
    for attr in attrs:
        hit |= _ATTR_ROWS.get_or_build((rkey, attr), lambda a=attr: _rows_mentioning(texts, a))
    return [rows[i] for i in sorted(hit) if rows[i]["id"] != check["id"]][:MAX_NEIGHBOURS]


def _candidate_rows(store: Store, version: str, check: dict[str, Any]
                    ) -> tuple[list[dict[str, Any]], list[tuple[str | None, str | None]]]:
    """Checks of ``check``'s file and of ``arg_groups/`` with their raw condition/guards text."""
    where = "(path = ? OR path LIKE ?)"
    params = [check["path"], "sglang/srt/arg_groups/%"]
    rows = store.checks(version, where=where, params=params)
    raw = {r["id"]: (r["condition"], r["guards"]) for r in store.query(
        f"SELECT id, condition, guards FROM checks WHERE release = ? AND {where}",
        [version, *params])}
    return rows, [raw.get(r["id"], (None, None)) for r in rows]


def _like_pattern(text: str) -> re.Pattern[str]:
    """SQLite's ``LIKE '%text%'``: ``_`` one character, ``%`` any run, ASCII case-insensitive."""
    body = "".join("." if c == "_" else ".*" if c == "%" else re.escape(c) for c in text)
    return re.compile(body, re.IGNORECASE | re.ASCII | re.DOTALL)


def _rows_mentioning(texts: list[tuple[str | None, str | None]], attr: str) -> frozenset[int]:
    pat = _like_pattern(attr)
    return frozenset(i for i, (cond, guards) in enumerate(texts)
                     if (cond is not None and pat.search(cond))
                     or (guards is not None and pat.search(guards)))


def fixes_check(store: Store, version: str, check: dict[str, Any], edit: Edit,
                attrs: dict[str, Value], facts: dict[str, Value], catalog: Catalog,
                memo: dict[tuple[Any, ...], object] | None = None,
                *, facts_sig: str | None = None) -> Verdict:
    """Phase 1: does ``edit`` make the check itself definitely pass?"""
    new_attrs = edited_attrs(attrs, edit, catalog)
    ev = evaluate_path(store, version, check, new_attrs, facts, memo=memo, facts_sig=facts_sig)
    return Verdict(edit, ev.fired is False if ev.fired is not UNKNOWN else UNKNOWN, evaluation=ev)


def verify(store: Store, version: str, check: dict[str, Any], edit: Edit, attrs: dict[str, Value],
           facts: dict[str, Value], catalog: Catalog) -> Verdict:
    """Both phases: the check passes, and no neighbouring check fires instead."""
    verdict = fixes_check(store, version, check, edit, attrs, facts, catalog)
    if verdict.fixes_check is True:
        recheck_neighbours(store, version, check, verdict, attrs, facts, catalog)
    return verdict


def recheck_neighbours(store: Store, version: str, check: dict[str, Any], verdict: Verdict,
                       attrs: dict[str, Value], facts: dict[str, Value], catalog: Catalog,
                       memo: dict[tuple[Any, ...], object] | None = None,
                       *, facts_sig: str | None = None) -> None:
    """Phase 2: record the other checks that ``verdict.edit`` would make fire.

    Without earlier writes a neighbour's verdict depends only on the values of
    the attributes its pieces read and on the facts, so it is memoised on them:
    in ``memo`` (one per triage) and process-wide (bounded, thread-safe). The
    whole re-check is memoised too, on the values of every attribute the
    neighbours read.
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
    whole = (rkey, fsig, check["id"], touched, tuple(values[n] for n in plan.names))
    hit = _RECHECKS.get(whole)
    if hit is None:
        trips: list[dict[str, Any]] = []
        unknown = 0
        for other, names in plan.rows:
            key = (other["id"], tuple((n, values[n]) for n in names))
            if key not in memo:
                memo[key] = _FIRED.get_or_build((rkey, fsig, key), lambda o=other: evaluate_path(
                    store, version, o, new_attrs, facts, apply_writes=False, facts_sig=fsig).fired)
            fired = memo[key]
            if fired is True:
                trips.append({"id": other["id"], "path": other["path"],
                              "function": other["function"], "line": other["start_line"],
                              "message": other["message"], "condition": other["condition"]})
            elif fired is UNKNOWN:
                unknown += 1
        hit = (tuple(trips), unknown)
        _RECHECKS.put(whole, hit)
    verdict.trips.extend(dict(t) for t in hit[0])
    verdict.unknown_neighbours += hit[1]


@dataclass(frozen=True)
class _NeighbourPlan:
    rows: tuple[tuple[dict[str, Any], tuple[str, ...]], ...]  # (neighbour, attributes it reads)
    names: tuple[str, ...]  # every attribute any neighbour reads, sorted


def _neighbour_plan(store: Store, version: str, check: dict[str, Any], touched: frozenset[str],
                    fact_names: frozenset[str]) -> _NeighbourPlan:
    """The neighbours for ``touched`` with the sorted attributes each reads (cached)."""
    def build() -> _NeighbourPlan:
        rows = tuple((o, tuple(sorted(prepared_pieces(store, version, o, fact_names)[1])))
                     for o in neighbours(store, version, check, set(touched)))
        return _NeighbourPlan(rows, tuple(sorted({n for _, names in rows for n in names})))

    key = (*release_key(store, version, "neighbour-plan"), check["id"], touched, fact_names)
    return _PLANS.get_or_build(key, build)


def intent_tier(edit: Edit, ev: PathEvaluation) -> int:
    """How much of the user's intent an edit gives up (lower keeps more).

    0: touches only what the failing test reads; 1: SGLang's own choice;
    2: the innermost guard; 3: outer guards and call sites, which usually
    switch the whole feature off (dropping ``--speculative-algorithm``, say).
    """
    if edit.origin.startswith("set explicitly what SGLang"):
        return 1
    touched = set(edit.set) | set(edit.remove)
    test_names: set[str] = set()
    inner_names: set[str] = set()
    guards = [p for p in ev.parts if p.role == "guard"]
    for part in ev.parts:
        names = {n for a in part.result.atoms for n, _, _ in a.inputs}
        if part.role == "test":
            test_names |= names
        elif guards and part is guards[-1]:
            inner_names |= names
    if ev.parts and ev.parts[-1].role != "test":  # a raise: its innermost guard is its test
        test_names |= inner_names
    if touched <= test_names:
        return 0
    if touched <= test_names | inner_names:
        return 2
    return 3


def rank(verdicts: list[Verdict], ev: PathEvaluation | None = None) -> list[Verdict]:
    def key(v: Verdict) -> tuple[Any, ...]:
        status = 0 if v.ok else (1 if v.fixes_check is True else 2)
        tier = intent_tier(v.edit, ev) if ev is not None else 0
        return (status, tier, len(v.trips), v.edit.size(), -len(v.edit.remove),
                v.unknown_neighbours, v.edit.key())

    return sorted(verdicts, key=key)


def propose(store: Store, version: str, check: dict[str, Any], ev: PathEvaluation,
            parsed: ParsedArgs, catalog: Catalog, attrs: dict[str, Value],
            facts: dict[str, Value], *, limit: int = 5,
            facts_sig: str | None = None) -> list[Verdict]:
    """The best ``limit`` candidate fixes for ``check`` (only those that fix it).

    ``facts_sig`` (:func:`~service.engine.cache.facts_signature` of ``facts``) keys the memo tables.
    """
    passing = []
    edits = candidate_edits(store, version, check, ev, parsed, catalog, attrs, facts)
    # cheapest-to-accept first, so phase 1 can stop once it has enough passing fixes
    edits.sort(key=lambda e: (intent_tier(e, ev), e.size(), -len(e.remove)))
    wanted = limit + RECHECK_SPARE
    guard_memo: dict[tuple[Any, ...], object] = {}
    fsig = facts_sig or facts_signature(facts)
    for edit in edits:
        v = fixes_check(store, version, check, edit, attrs, facts, catalog, guard_memo,
                        facts_sig=fsig)
        if v.fixes_check is True:
            passing.append(v)
        if len(passing) >= wanted:
            break
    # phase 2 only for the most promising few: neighbour re-checks are the costly part
    shortlist = rank(passing, ev)[:wanted]
    memo: dict[tuple[Any, ...], object] = {}
    for v in shortlist:
        recheck_neighbours(store, version, check, v, attrs, facts, catalog, memo, facts_sig=fsig)
    ranked = rank(shortlist, ev)
    # drop supersets of a clean fix (dropping A and B when dropping A alone is enough)
    out: list[Verdict] = []
    for v in ranked:
        if any(o.ok and set(o.edit.remove) < set(v.edit.remove) and not o.edit.set and not v.edit.set
               for o in out):
            continue
        out.append(v)
    return out[:limit]
