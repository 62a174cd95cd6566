"""Candidate edits of the command, and what an edit does to the attributes.

Candidates come from the condition itself, never from a list of known answers:

* dropping flags the user set that the condition reads (alone, in pairs, in
  threes);
* setting an attribute (not the machine's ``--device``) to a constant the condition
  compares it with, to one of the flag's choices, to a nearby power of two when the
  condition divides or multiplies by it (a parallel size), or toggling a boolean flag;
* keeping a flag the user set that SGLang resets before the check: failing the reset's
  guard (:mod:`service.engine.fixes.resets`);
* "what SGLang would choose": when the check's own function assigns the
  attributes right after the check (``(steps, topk, draft) =
  auto_choose_speculative_params(self)``), the values that call returns for
  these flags and facts, set explicitly together.

:func:`candidate_edits` lists them; :func:`edited_attrs` gives the attributes a launch
has after an edit (a dropped flag takes its default). The candidates are judged by
:func:`service.engine.fixes.propose.propose`.
"""

from __future__ import annotations

import ast
import functools
import itertools
from typing import Any

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.cache import cached, release_key
from service.engine.evaluate import chain
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.evaluate.symbolic import call_value
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Value
from service.engine.fixes.companions import companion_sets
from service.engine.fixes.intent import sane_value
from service.engine.fixes.model import Edit
from service.engine.fixes.resets import reset_edits
from service.engine.flags.parse import ParsedArgs

MAX_CANDIDATES = 40
_NO_VALUE = object()  # no default to compare with
_NEVER_DROP = frozenset({"model_path"})  # flags no candidate drops
#: flags naming the machine the server runs on: no candidate sets them (a GPU launch is not
#: fixed by moving it to the CPU); one the user set may still be dropped
MACHINE = frozenset({"device"})


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


def _arithmetic_values(attr: str, conditions: list[str], current: object) -> list[int]:
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


def _choice_sites(store: Store, version: str, check: Check) -> list[tuple[list[str], str]]:
    """Assignments from a call within 12 lines after ``check`` in its function:
    (attributes assigned, call source), in ``ast.walk`` order (cached per release and check)."""

    def build() -> list[tuple[list[str], str]]:
        fn_rows = store.functions_at(version, check.path, check.start_line)
        if not fn_rows:
            return []
        node = chain.function_ast(store, version, fn_rows[0])
        if node is None:
            return []
        offset = fn_rows[0]["start_line"] - 1
        sites: list[tuple[list[str], str]] = []
        for stmt in ast.walk(node):
            if not isinstance(stmt, ast.Assign) or stmt.lineno + offset <= check.end_line:
                continue
            if stmt.lineno + offset > check.end_line + 12:
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

    return cached(release_key(store, version, f"choice-sites:{check.id}"), build)


def _sglang_choice(
    store: Store,
    version: str,
    check: Check,
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
    check: Check,
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
    edits += reset_edits(store, version, check, ev, parsed, catalog, attrs, facts, _constants_for)
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
        if _sane(e, by_attr, attrs) and MACHINE.isdisjoint(e.set):
            unique.setdefault(e.key(), e)
    return list(unique.values())[: MAX_CANDIDATES * 3]


def _sane(edit: Edit, by_attr: dict[str, Any], attrs: dict[str, Value]) -> bool:
    """No value that only satisfies a comparison (:func:`~service.engine.fixes.intent.sane_value`)."""
    return all(
        sane_value(by_attr.get(a), v, attrs[a].value if a in attrs else UNKNOWN)
        for a, v in edit.set.items()
    )


def edited_attrs(attrs: dict[str, Value], edit: Edit, catalog: Catalog) -> dict[str, Value]:
    """``attrs`` after ``edit`` (a new dict): a removed flag takes its declared default (else
    the catalog's, else unknown), a set flag the value set."""
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
