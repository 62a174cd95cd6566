"""Ground truth for generated incidents, computed with the evaluator, never the engine's fixes.

A :class:`Prober` holds one release's flag catalog and its validation checks in
validation order. For a launch context (model, hardware, base flags) it can

* :meth:`Prober.make_fire` — search flag assignments that make a check's path
  condition evaluate to True (a guided depth-first search: the first piece of
  the path condition that does not hold yet is made to hold by setting a flag
  it reads, to a constant it compares with, one of the flag's choices or a
  typical value of the flag's type);
* :meth:`Prober.earlier_firing` — find a check that runs earlier in the
  validation order and would fire first (then the expected location would be
  wrong, so the generator discards the assignment);
* :meth:`Prober.acceptable_fixes` — single and pair edits (drop a flag the
  condition reads, or set it to a candidate value) after which the path
  condition is definitely false and no other validation check that reads an
  edited flag starts to fire;
* :func:`root_cause_attrs` — the user-set flags read by the failing atoms of
  the innermost piece of the path condition that has any (the assert's test,
  else the innermost guard, outward; call-site guards never count).

Only :mod:`service.engine.evaluate.path_condition` (with ``chain``, ``flags``,
``facts`` and the catalog) decides; the engine's ``fixes`` and ``locate``
modules are not imported, so expectations are not circular. The values the search tries
are :mod:`evals.probe_values`'s, and the checks' validation order
:mod:`evals.check_order`'s.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from evals.check_order import validation_positions
from evals.probe_values import (
    FLOAT_VALUES,
    FROZEN_ATTRS,
    INT_VALUES,
    PARALLEL_SIZES,
    compared_constants,
    path_value,
)
from kb.catalog_types import NO_VALUE_ACTIONS, Catalog, FlagSpec
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store
from service.engine import (
    UNKNOWN,
    PathEvaluation,
    Provenance,
    Value,
    apply_edits,
    base_attrs,
    earlier_writes,
    evaluate_path,
    fact_key,
    fact_values,
    get_profile,
    parse_argv,
    prepared_pieces,
    referenced_names,
)


@dataclass(frozen=True)
class Context:
    """A launch context: release, model (and its architecture), hardware profile, base flags."""

    release: str
    model: str
    model_arch: str | None
    hardware: str
    base_argv: tuple[str, ...]


@dataclass
class Probe:
    """An assignment of flags (attr -> value) and what it does to one check."""

    assign: dict[str, object]
    argv: list[str]
    evaluation: PathEvaluation
    attrs: dict[str, Value] = field(default_factory=dict)


def facts_for(ctx: Context) -> dict[str, Value]:
    """The declared facts of ``ctx``, built as the engine builds them for a triage."""
    facts = dict(fact_values(get_profile(ctx.hardware), ctx.model_arch, {}, model=ctx.model))
    if ctx.model_arch:
        key = fact_key("self.get_model_config().hf_config.architectures")
        facts.setdefault(
            key, Value([ctx.model_arch], Provenance("fact", f"model architecture {ctx.model_arch}"))
        )
    return facts


def _fired_index(ev: PathEvaluation) -> int:
    """Index of the first piece that does not hold (len(parts) when the check fires)."""
    for i, part in enumerate(ev.parts):
        if part.holds is not True:
            return i
    return len(ev.parts)


def _progress(ev: PathEvaluation) -> tuple[int, int]:
    """(first piece that does not hold, atoms of it already pointing the way it must go)."""
    k = _fired_index(ev)
    if k >= len(ev.parts):
        return (k, 0)
    part = ev.parts[k]
    return (k, sum(1 for a in part.result.atoms if a.value is part.polarity))


class Prober:
    """Evaluate checks of one release under generated launch commands."""

    def __init__(self, store: Store, release: str) -> None:
        self.store = store
        self.release = release
        self.catalog: Catalog = load_catalog(store, release)
        self.by_attr: dict[str, FlagSpec] = self.catalog.by_attr()
        self.order = validation_positions(store, release)
        self.checks = [c for c in store.checks(release) if c.id in self.order]
        self.checks.sort(key=lambda c: self.order[c.id])
        self._base: dict[tuple[Context, int], object] = {}
        self._names: dict[tuple[int, frozenset[str]], frozenset[str]] = {}
        self._attrs: dict[tuple[str, ...], dict[str, Value]] = {}
        self._memos: dict[int, dict[tuple[Any, ...], object]] = {}
        self._facts: dict[Context, dict[str, Value]] = {}

    def facts(self, ctx: Context) -> dict[str, Value]:
        """The facts of ``ctx`` (one object per context, so memoised guard truths are reused)."""
        if ctx not in self._facts:
            self._facts[ctx] = facts_for(ctx)
        return self._facts[ctx]

    # -- evaluation ---------------------------------------------------------------------
    def argv_for(
        self, ctx: Context, assign: dict[str, object], remove: list[str] | None = None
    ) -> list[str]:
        return apply_edits(list(ctx.base_argv), self.catalog, set=dict(assign), remove=remove or [])

    def attrs_for(self, argv: list[str]) -> dict[str, Value]:
        """Defaults overlaid with the flags of ``argv`` (cached; callers must not mutate)."""
        key = tuple(argv)
        hit = self._attrs.get(key)
        if hit is None:
            if len(self._attrs) > 4096:
                self._attrs.clear()
            hit = self._attrs[key] = base_attrs(self.catalog, parse_argv(argv, self.catalog))
        return hit

    def evaluate(self, check: Check, argv: list[str], facts: dict[str, Value]) -> PathEvaluation:
        # guard truths are memoised per set of facts (keyed by the attribute values they read)
        memo = self._memos.setdefault(id(facts), {})
        if len(memo) > 200_000:
            memo.clear()
        try:
            return evaluate_path(
                self.store, self.release, check, self.attrs_for(argv), facts, memo=memo
            )
        except Exception as exc:
            return PathEvaluation(UNKNOWN, [], set(), [f"evaluation failed: {exc}"])

    def names(self, check: Check, facts: dict[str, Value]) -> frozenset[str]:
        key = (check.id, frozenset(facts))
        if key not in self._names:
            _, names = prepared_pieces(self.store, self.release, check, frozenset(facts))
            deps = set(names)
            for attr in names:
                for w in earlier_writes(self.store, self.release, attr, check):
                    for text in [w.value or "", *(g["condition"] for g in w.guards)]:
                        try:
                            deps |= referenced_names(text) if text else set()
                        except Exception:
                            continue
            self._names[key] = frozenset(deps)
        return self._names[key]

    def flag_attrs(self, text: str) -> list[str]:
        try:
            names = referenced_names(text)
        except Exception:
            return []
        return sorted(
            a
            for a in names
            if a in self.by_attr and a not in FROZEN_ATTRS and not self.by_attr[a].deprecated
        )

    def levers(self, check: Check, condition: str) -> list[str]:
        """Flags that can change ``condition``: those it reads, then those the guards of
        earlier writes of them read (``--speculative-num-steps`` keeps the user's topk)."""
        direct = self.flag_attrs(condition)
        extra: list[str] = []
        for attr in direct:
            for w in earlier_writes(self.store, self.release, attr, check):
                for g in w.guards:
                    extra += [
                        a
                        for a in self.flag_attrs(g["condition"])
                        if a not in direct and a not in extra
                    ]
        return direct + sorted(extra)

    def candidates(self, attr: str, conditions: list[str], ctx: Context) -> list[object]:
        """Values worth trying for ``attr`` (never None: that is a removal)."""
        spec = self.by_attr[attr]
        if spec.action in NO_VALUE_ACTIONS:
            return [True] if spec.action in ("store_true", "BooleanOptionalAction") else [False]
        values: list[object] = list(compared_constants(attr, conditions))
        values += list(spec.choices or [])
        kind = (spec.type or "").lower()
        default = spec.default if spec.default_known else None
        if "int" in kind or isinstance(default, int) and not isinstance(default, bool):
            values += list(INT_VALUES)
        elif "float" in kind or isinstance(default, float):
            values += list(FLOAT_VALUES)
        elif not spec.choices and (attr.endswith(("_path", "_dir")) or "path" in attr):
            values.append(path_value(attr, ctx.model))
        gpus = get_profile(ctx.hardware).count or 1
        out: list[object] = []
        for v in values:
            if v is None or isinstance(v, bool) and spec.action not in NO_VALUE_ACTIONS:
                continue
            if isinstance(v, int | float) and not isinstance(v, bool):
                if v < 0 or v == 0 and attr.endswith("_size"):
                    continue
                if attr in PARALLEL_SIZES and v > gpus:
                    continue  # more ranks than the machine has GPUs
            if spec.choices and v not in spec.choices:
                continue
            if v not in out:
                out.append(v)
        return out[:24]

    # -- search -------------------------------------------------------------------------
    def make_fire(
        self,
        check: Check,
        ctx: Context,
        rng: random.Random,
        *,
        budget: int = 120,
        depth: int = 5,
    ) -> Probe | None:
        """An assignment under which ``check``'s path condition is True, or None.

        Depth-first: the first piece of the path condition that does not hold is
        pushed towards holding by one flag (then by two, a flag it reads plus one
        that guards an earlier write of it); a move counts as progress when a later
        piece becomes the first that does not hold, or more of this piece's atoms
        point the way it must go.
        """
        facts = self.facts(ctx)
        left = [budget]

        def ev_of(assign: dict[str, object]) -> PathEvaluation:
            left[0] -= 1
            return self.evaluate(check, self.argv_for(ctx, assign), facts)

        def dfs(assign: dict[str, object], ev: PathEvaluation, d: int) -> Probe | None:
            if ev.fired is True:
                return Probe(assign, self.argv_for(ctx, assign), ev)
            k = _fired_index(ev)
            if d == 0 or k >= len(ev.parts):
                return None
            score = _progress(ev)
            part = ev.parts[k]
            conditions = [p.condition for p in ev.parts]
            direct = self.flag_attrs(part.condition)
            levers = [a for a in self.levers(check, part.condition) if a not in direct]
            singles = [
                ((a, v),)
                for a in direct + levers
                for v in self.candidates(a, conditions, ctx)
                if assign.get(a) != v
            ]
            pairs = [
                ((a, v), (b, w))
                for ((a, v),) in singles
                for ((b, w),) in singles
                if a in direct and b in levers
            ]
            rng.shuffle(singles)
            rng.shuffle(pairs)
            for moves in [*singles, *pairs]:
                if left[0] <= 0:
                    return None
                new = {**assign, **dict(moves)}
                ev2 = ev_of(new)
                if _progress(ev2) > score:
                    found = dfs(new, ev2, d - 1)
                    if found is not None:
                        return found
            return None

        return dfs({}, ev_of({}), depth)

    def earlier(self, check: Check) -> list[Check]:
        key = self.order[check.id]
        return [c for c in self.checks if self.order[c.id] < key]

    def earlier_firing(
        self, check: Check, ctx: Context, argv: list[str], changed: set[str]
    ) -> Check | None:
        """A check that runs before ``check`` and fires under ``argv`` (None if none does).

        Checks that read none of ``changed`` (nor anything their earlier writes read)
        keep the verdict they have under the base command, which is cached per context.
        """
        facts = self.facts(ctx)
        base = list(ctx.base_argv)
        for other in self.earlier(check):
            if changed & self.names(other, facts):
                fired = self.evaluate(other, argv, facts).fired
            else:
                bkey = (ctx, other.id)
                if bkey not in self._base:
                    self._base[bkey] = self.evaluate(other, base, facts).fired
                fired = self._base[bkey]
            if fired is True:
                return other
        return None

    # -- expectations ---------------------------------------------------------------------
    def acceptable_fixes(
        self, check: Check, ctx: Context, probe: Probe, *, max_pairs: int = 40
    ) -> list[dict[str, Any]]:
        """Single and pair edits that make the check definitely pass without new failures."""
        facts = self.facts(ctx)
        ev = probe.evaluation
        parsed = parse_argv(probe.argv, self.catalog)
        conditions = [p.condition for p in ev.parts]
        readable = sorted(
            a
            for a in ev.attrs
            if a in self.by_attr and a not in FROZEN_ATTRS and not self.by_attr[a].deprecated
        )
        singles: list[tuple[str, str, object]] = []
        for attr in readable:
            if attr in parsed.values:
                singles.append(("remove", attr, None))
            current = (
                parsed.values[attr].value
                if attr in parsed.values
                else (self.by_attr[attr].default if self.by_attr[attr].default_known else None)
            )
            for value in self.candidates(attr, conditions, ctx):
                if value != current:
                    singles.append(("set", attr, value))
        fixes: list[dict[str, Any]] = []
        failed: list[tuple[str, str, object]] = []
        for edit in singles:
            if self._fixes(check, ctx, probe, [edit], facts):
                fixes.append(_spelled([edit], self.by_attr))
            else:
                failed.append(edit)
        fixed_attrs = {a for f in fixes for a in (*f["_attrs"],)}
        pairs = [
            (x, y)
            for x, y in itertools.combinations(failed, 2)
            if x[1] != y[1] and x[1] not in fixed_attrs and y[1] not in fixed_attrs
        ]
        pairs.sort(key=lambda p: (p[0][0] != "remove") + (p[1][0] != "remove"))
        for pair in pairs[:max_pairs]:
            if self._fixes(check, ctx, probe, list(pair), facts):
                fixes.append(_spelled(list(pair), self.by_attr))
        for f in fixes:
            f.pop("_attrs", None)
        return fixes

    def _fixes(
        self,
        check: Check,
        ctx: Context,
        probe: Probe,
        edits: list[tuple[str, str, object]],
        facts: dict[str, Value],
    ) -> bool:
        assign = dict(probe.assign)
        remove = [attr for op, attr, _ in edits if op == "remove"]
        for op, attr, value in edits:
            if op == "set":
                assign[attr] = value
            else:
                assign.pop(attr, None)
        argv = apply_edits(
            list(probe.argv),
            self.catalog,
            set={a: v for op, a, v in edits if op == "set"},
            remove=remove,
        )
        if self.evaluate(check, argv, facts).fired is not False:
            return False
        touched = {attr for _, attr, _ in edits}
        for other in self.checks:
            if other.id == check.id or not touched & self.names(other, facts):
                continue
            if (
                self.evaluate(other, argv, facts).fired is True
                and self.evaluate(other, probe.argv, facts).fired is not True
            ):
                return False
        return True


def _spelled(edits: list[tuple[str, str, object]], by_attr: dict[str, FlagSpec]) -> dict[str, Any]:
    out: dict[str, Any] = {"set": {}, "remove": [], "_attrs": [a for _, a, _ in edits]}
    for op, attr, value in edits:
        flag = by_attr[attr].flags[0]
        if op == "remove":
            out["remove"].append(flag)
        else:
            out["set"][flag] = value
    return out


def root_cause_attrs(ev: PathEvaluation, user_attrs: set[str]) -> list[str]:
    """User-set attrs read by failing atoms of the innermost piece that has any.

    An atom fails as the engine says (:meth:`~service.engine.PiecePart.atoms_failing`):
    under a ``not`` its negation pushes the piece towards firing (``not x == "null"``
    fails when ``x`` is not ``"null"``), and earlier sibling checks that passed explain
    nothing."""
    for part in reversed(ev.parts):
        if part.role == "call_site" or part.holds is not True:
            continue
        found: list[str] = []
        for atom, failing in zip(part.result.atoms, part.atoms_failing(), strict=True):
            if not failing:
                continue
            for name, _, prov in atom.inputs:
                if prov.kind == "flag" and name in user_attrs and name not in found:
                    found.append(name)
        if found:
            return sorted(found)
    return []


__all__ = ["FROZEN_ATTRS", "Context", "Probe", "Prober", "facts_for", "root_cause_attrs"]
