"""Candidate flag fixes: minimal edits that make the failing path condition false.

Candidates come from the condition itself, never from a list of known answers:

* dropping flags the user set that the condition reads (alone, in pairs, in
  threes);
* setting an attribute to a constant the condition compares it with, to one
  of the flag's choices, to a nearby power of two when the condition divides or
  multiplies by it (a parallel size), or toggling a boolean flag;
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
from dataclasses import dataclass
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
from service.engine.fixes.companions import companion_sets
from service.engine.fixes.filters import guard_flip, screened, sibling_trips, turns_off
from service.engine.fixes.implied import assumed_launch
from service.engine.fixes.intent import intent_cost, sane_value
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.ranking import Cost, diverse, rank
from service.engine.flags.parse import ParsedArgs

MAX_CANDIDATES = 40
MAX_NEIGHBOURS = 150
RECHECK_SPARE = 5
_NO_VALUE = object()  # no default to compare with
_NEVER_DROP = frozenset({"model_path"})  # candidates re-checked beyond the number returned

# (release key, file) -> neighbour candidate rows and their raw condition/guards text
_NEIGHBOUR_ROWS: LRUCache[tuple[list[dict[str, Any]], list[tuple[str | None, str | None]]]] = (
    LRUCache("fixes.neighbour_rows", 64)
)
# ((release key, file), attr) -> indexes of the candidate rows that mention attr
_ATTR_ROWS: LRUCache[frozenset[int]] = LRUCache("fixes.attr_rows", 8192)
# (release key, facts, (check id, values read)) -> the check's verdict without earlier writes
_FIRED: LRUCache[object] = LRUCache("fixes.neighbour_fired", 50_000)
# (release key, check, touched attrs, facts) -> its neighbours and what they read
_PLANS: LRUCache[_NeighbourPlan] = LRUCache("fixes.neighbour_plans", 2048)
# (release key, facts, check, touched attrs, values the neighbours read) -> (trips, unknown count)
_RECHECKS: LRUCache[tuple[tuple[dict[str, Any], ...], int]] = LRUCache("fixes.rechecks", 5_000)


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


_ARITH_OPS = (ast.FloorDiv, ast.Div, ast.Mod, ast.Mult)
#: parallel sizes and block counts tried for an integer divided or multiplied in a test
_SIZES = (1, 2, 4, 8, 16, 32)


def _arithmetic_values(attr: str, conditions: list[str], current: object) -> list[object]:
    """Sizes to try for an integer ``attr`` that ``conditions`` divide or multiply by
    (``moe_intermediate_size // (tp_size // ep_size) % 128``): powers of two up to 32,
    nearest to ``current`` first (``[]`` when ``attr`` is in no such arithmetic)."""
    if isinstance(current, bool) or not isinstance(current, int) or current < 1:
        return []
    if not any(_in_arithmetic(attr, text) for text in conditions):
        return []
    ratio = {v: max(v, current) / min(v, current) for v in _SIZES if v != current}
    return sorted(ratio, key=lambda v: (ratio[v], v))[:4]


@functools.lru_cache(maxsize=4096)
def _in_arithmetic(attr: str, text: str) -> bool:
    tree = _condition_tree(text)
    if tree is None:
        return False
    return any(
        isinstance(node, ast.BinOp)
        and isinstance(node.op, _ARITH_OPS)
        and any(isinstance(side, ast.Attribute) and side.attr == attr for side in ast.walk(node))
        for node in ast.walk(tree)
    )


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
            names = [
                e.attr
                for e in (target.elts if isinstance(target, ast.Tuple) else [target])
                if isinstance(e, ast.Attribute)
            ]
            if not names or not isinstance(stmt.value, ast.Call):
                continue
            sites.append((names, ast.unparse(stmt.value)))
        return sites

    return cached(release_key(store, version, f"choice-sites:{check['id']}"), build)


def _sglang_choice(
    store: Store,
    version: str,
    check: dict[str, Any],
    attrs: dict[str, Value],
    facts: dict[str, Value],
) -> dict[str, object]:
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


def candidate_edits(
    store: Store,
    version: str,
    check: dict[str, Any],
    ev: PathEvaluation,
    parsed: ParsedArgs,
    catalog: Catalog,
    attrs: dict[str, Value],
    facts: dict[str, Value],
) -> list[Edit]:
    by_attr = catalog.by_attr()
    conditions = [p.condition for p in ev.parts]
    # a required flag (the model path) is never dropped: no launch works without it
    user_set = [
        a
        for a in sorted(ev.attrs)
        if a in parsed.values
        and not (a in by_attr and by_attr[a].required)
        and a not in _NEVER_DROP
    ]
    edits: list[Edit] = []
    sites = _choice_sites(store, version, check)
    for add, origin, agrees in companion_sets(store, version, sites, parsed, Env(attrs, facts)):
        if all(a in by_attr for a in add):
            edits.append(Edit(set=add, origin=origin, preference=0 if agrees else 1))
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
            if attr not in user_set:  # switching off a switch the user set is dropping it
                edits.append(
                    Edit(
                        set={attr: not bool(current) if current is not UNKNOWN else True},
                        origin="toggle",
                    )
                )
            continue
        values = _constants_for(attr, conditions)
        values += [c for c in (spec.choices or [])[:8] if c not in values]
        values += [v for v in _arithmetic_values(attr, conditions, current) if v not in values]
        # setting a flag the user set back to its default is dropping it (listed above)
        default = spec.default if spec.default_known and attr in user_set else _NO_VALUE
        for v in values:
            if v != current and not (
                v == default and isinstance(v, bool) == isinstance(default, bool)
            ):
                edits.append(Edit(set={attr: v}, origin="a value the check accepts"))
    unique: dict[tuple[Any, ...], Edit] = {}
    for e in edits:
        if _sane(e, by_attr, attrs):
            unique.setdefault(e.key(), e)
    return list(unique.values())[: MAX_CANDIDATES * 3]


def _sane(edit: Edit, by_attr: dict[str, Any], attrs: dict[str, Value]) -> bool:
    """No value that only satisfies a comparison (:func:`~service.engine.fixes.intent.sane_value`)."""
    return all(
        sane_value(by_attr.get(a), v, attrs[a].value if a in attrs else UNKNOWN)
        for a, v in edit.set.items()
    )


def edited_attrs(attrs: dict[str, Value], edit: Edit, catalog: Catalog) -> dict[str, Value]:
    new = dict(attrs)
    defaults = _last_spec_by_attr(catalog)
    for attr in edit.remove:
        spec = defaults.get(attr)
        decl = catalog.declaration(attr)
        if decl is not None and decl.default_known:
            new[attr] = Value(
                decl.default,
                Provenance(
                    "default", f"default {decl.default!r} ({decl.path}:{decl.line}) after the fix"
                ),
            )
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


def neighbours(
    store: Store, version: str, check: dict[str, Any], attrs: set[str]
) -> list[dict[str, Any]]:
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


def _candidate_rows(
    store: Store, version: str, check: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[tuple[str | None, str | None]]]:
    """Checks of ``check``'s file and of ``arg_groups/`` with their raw condition/guards text."""
    where = "(path = ? OR path LIKE ?)"
    params = [check["path"], "sglang/srt/arg_groups/%"]
    rows = store.checks(version, where=where, params=params)
    raw = {
        r["id"]: (r["condition"], r["guards"])
        for r in store.query(
            f"SELECT id, condition, guards FROM checks WHERE release = ? AND {where}",
            [version, *params],
        )
    }
    return rows, [raw.get(r["id"], (None, None)) for r in rows]


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


def fixes_check(
    store: Store,
    version: str,
    check: dict[str, Any],
    edit: Edit,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    catalog: Catalog,
    memo: dict[tuple[Any, ...], object] | None = None,
    *,
    facts_sig: str | None = None,
) -> Verdict:
    """Phase 1: does ``edit`` make the check itself definitely pass?"""
    new_attrs = edited_attrs(attrs, edit, catalog)
    ev = evaluate_path(store, version, check, new_attrs, facts, memo=memo, facts_sig=facts_sig)
    return Verdict(edit, ev.fired is False if ev.fired is not UNKNOWN else UNKNOWN, evaluation=ev)


def verify(
    store: Store,
    version: str,
    check: dict[str, Any],
    edit: Edit,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    catalog: Catalog,
) -> Verdict:
    """Both phases: the check passes, and no neighbouring check fires instead."""
    verdict = fixes_check(store, version, check, edit, attrs, facts, catalog)
    if verdict.fixes_check is True:
        recheck_neighbours(store, version, check, verdict, attrs, facts, catalog)
    return verdict


def recheck_neighbours(
    store: Store,
    version: str,
    check: dict[str, Any],
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
                memo[key] = _FIRED.get_or_build(
                    (rkey, fsig, key),
                    lambda o=other: (
                        evaluate_path(
                            store, version, o, new_attrs, facts, apply_writes=False, facts_sig=fsig
                        ).fired
                    ),
                )
            fired = memo[key]
            if fired is True:
                trips.append(
                    {
                        "id": other["id"],
                        "path": other["path"],
                        "function": other["function"],
                        "line": other["start_line"],
                        "message": other["message"],
                        "condition": other["condition"],
                    }
                )
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


def _neighbour_plan(
    store: Store,
    version: str,
    check: dict[str, Any],
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

    key = (*release_key(store, version, "neighbour-plan"), check["id"], touched, fact_names)
    return _PLANS.get_or_build(key, build)


def _best_giving_up(ranked: list[Verdict], checked: list[Verdict], costs: Cost) -> Verdict | None:
    """The best-ranked candidate giving up a feature, when none of ``checked`` does."""
    if any(costs[v.edit.key()].features for v in checked):
        return None
    return next((v for v in ranked if costs[v.edit.key()].features and v not in checked), None)


def propose(
    store: Store,
    version: str,
    check: dict[str, Any],
    ev: PathEvaluation,
    parsed: ParsedArgs,
    catalog: Catalog,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    *,
    limit: int = 5,
    facts_sig: str | None = None,
) -> list[Verdict]:
    """The best ``limit`` candidate fixes for ``check``, ranked by :func:`rank`.

    Every candidate's check is evaluated (phase 1); those that fix it are re-checked
    against the neighbouring checks (phase 2) best first, the ``limit`` best and a few
    spare, and on until one is clean when none of those is. When the check itself is
    undecided (``ev.fired`` unknown) or no candidate is shown to fix it cleanly, the list is
    filled up to ``limit`` with candidates whose verdict is unknown, ranked by intent, for
    replay to decide (``fixes_check`` UNKNOWN; never recommended). A check that
    evaluates false with these inputs gets none: the static picture contradicts the
    crash, and candidates ranked on it would be guesses.

    Without the user's command (:func:`~service.engine.fixes.implied.command_unknown`) and a
    check that does not fire on the defaults, the candidates are proposed for the flags the
    raised check implies (:func:`~service.engine.fixes.implied.implied_launch`), and each
    fix says what it assumed.

    ``facts_sig`` (:func:`~service.engine.cache.facts_signature` of ``facts``) keys the memo tables.
    """
    fsig = facts_sig or facts_signature(facts)
    assumed = ""
    # no command: propose for the flags the raised check implies (fixes/implied.py)
    launch = assumed_launch(
        store, version, check, ev, attrs, parsed, catalog, facts, facts_sig=fsig
    )
    if launch is not None and launch.evaluation is not None:
        ev, attrs, parsed, assumed = (
            launch.evaluation,
            launch.attrs,
            launch.parsed,
            launch.note(catalog),
        )
    edits = screened(
        store,
        version,
        ev,
        candidate_edits(store, version, check, ev, parsed, catalog, attrs, facts),
        parsed,
        attrs,
        facts,
        lambda e: edited_attrs(attrs, e, catalog),
        facts_sig=fsig,
    )
    costs: Cost = {e.key(): intent_cost(e.set, e.remove, parsed, catalog, attrs) for e in edits}
    guard_memo: dict[tuple[Any, ...], object] = {}
    passing: list[Verdict] = []
    undecided: list[Verdict] = []
    for edit in edits:
        v = fixes_check(
            store, version, check, edit, attrs, facts, catalog, guard_memo, facts_sig=fsig
        )
        flip = guard_flip(edit, ev) if v.fixes_check is True else None
        if flip is not None:  # skips the check rather than fixing it: ranked after real fixes
            edit.skips = turns_off(edit, flip, parsed, catalog)
        if v.fixes_check is True and v.evaluation is not None:  # an earlier sibling raises
            v.trips.extend(sibling_trips(check, v.evaluation))
        if v.fixes_check is True:
            passing.append(v)
        elif v.fixes_check is UNKNOWN:
            undecided.append(v)
    # phase 2 only for the most promising: neighbour re-checks are the costly part
    ranked = rank(passing, ev, costs, skips_first=bool(assumed))
    wanted = limit + RECHECK_SPARE
    memo: dict[tuple[Any, ...], object] = {}
    checked: list[Verdict] = []
    for v in diverse(ranked, costs):  # other kinds of fix before a third value of one kind
        if len(checked) >= wanted and (any(c.ok for c in checked) or len(checked) >= 3 * wanted):
            break
        recheck_neighbours(store, version, check, v, attrs, facts, catalog, memo, facts_sig=fsig)
        checked.append(v)
    alternative = _best_giving_up(ranked, checked, costs)
    if alternative is not None:
        recheck_neighbours(
            store, version, check, alternative, attrs, facts, catalog, memo, facts_sig=fsig
        )
        checked.append(alternative)
    # drop supersets of a clean fix (dropping A and B when dropping A alone is enough); a
    # subset that only skips the check does not count (replay may refute it: the pair stays)
    out: list[Verdict] = []
    for v in rank(checked, ev, costs, skips_first=bool(assumed)):
        if any(
            o.ok
            and not o.edit.skips
            and set(o.edit.remove) < set(v.edit.remove)
            and not o.edit.set
            and not v.edit.set
            for o in checked
        ):
            continue
        out.append(v)
    out = diverse(out, costs)[:limit]
    # when every fix listed keeps the request, the best clean one that gives part of it up is
    # listed too (last): the user's call, and the rule cards may refute the others
    alt = next(
        (
            v
            for v in rank(checked, ev, costs, skips_first=bool(assumed))
            if v.ok and costs[v.edit.key()].features
        ),
        None,
    )
    if (
        alt is not None
        and len(out) == limit
        and not any(costs[v.edit.key()].features for v in out)
        and alt not in out
    ):
        out[-1] = alt
    if (
        ev.fired is not False
        and (ev.fired is UNKNOWN or not any(v.ok for v in out))
        and len(out) < limit
    ):
        out += rank(undecided, ev, costs, skips_first=bool(assumed))[: limit - len(out)]
    for v in out if assumed else []:
        v.edit.notes.append(assumed)
    return out
