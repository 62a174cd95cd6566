"""The writes of earlier validation steps, folded into the attributes a check reads.

A write whose guards hold (``NEXTN`` → ``EAGLE``, say) sets the attribute before the
check runs; one whose guard cannot be decided is reported as "may be changed at path:line
when …" and its value becomes unknown rather than guessed. The writes are taken in
validation order (:mod:`service.engine.evaluate.chain`) and prepared by
:mod:`service.engine.evaluate.resolution`; what each write does is evaluated by
:mod:`service.engine.evaluate.write_effects`. The fold is memoised on the values that decide
it. Used by :func:`service.engine.evaluate.path_condition.evaluate_path`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, MutableMapping
from typing import Any

from kb.code_types import Check
from kb.store import Store
from service.engine.cache import (
    LRUCache,
    cached,
    cached_on_members,
    cached_on_members_seen,
    release_key,
)
from service.engine.evaluate import chain, resolution
from service.engine.evaluate.guard_memo import holds
from service.engine.evaluate.memo_keys import value_key
from service.engine.evaluate.slice_plan import Plan, plan_reads
from service.engine.evaluate.write_effects import Effect, Fold, fold_effects
from service.engine.expr.interpreter import Env, Value, referenced_names
from service.engine.expr.overlay import Overlay
from service.engine.expr.trace import (
    FactNames,
    FactsTrace,
    Reads,
    member_reads,
    reads_match,
    shared_answers,
)

__all__ = [
    "Effect",
    "Fold",
    "apply_earlier_writes",
    "fold_earlier_writes",
    "fold_effects",
    "fold_plan",
    "write_dependencies",
    "write_fails",
]

# (release, check, names, values read) -> what folding the earlier writes does, per way
# the facts answered the fold's reads of them
_FOLDS: LRUCache[tuple[tuple[Reads, Fold], ...]] = LRUCache("evaluation.folds", 20_000)
_FOLD_VARIANTS = 8
# (release, check, names) -> the last fold made afresh: (its plan, the values of the names
# that decide it, each write's effect with the facts it read); a fold for values differing
# in a few names evaluates only the writes those reach (:func:`fold_effects`)
_LAST: LRUCache[tuple[Plan, tuple[str, ...], tuple[Effect, ...]]] = LRUCache(
    "evaluation.folds_last", 1_000
)


def apply_earlier_writes(
    store: Store,
    version: str,
    check: Check,
    attrs: dict[str, Value],
    facts: Mapping[str, Value],
    names: set[str],
    memo: dict[tuple[Any, ...], object] | None = None,
    facts_sig: str | None = None,
) -> tuple[list[str], dict[str, list[str]]]:
    """Fold the writes that run before ``check`` into ``attrs`` (in place).

    Returns (caveats, notes by attribute); see :func:`fold_earlier_writes`.
    """
    assigned, caveats, notes = fold_earlier_writes(
        store, version, check, attrs, facts, names, memo, facts_sig
    )
    for attr, value in assigned:
        attrs[attr] = value
    return list(caveats), {k: list(v) for k, v in notes.items()}


def fold_earlier_writes(
    store: Store,
    version: str,
    check: Check,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    names: Collection[str],
    memo: dict[tuple[Any, ...], object] | None = None,
    facts_sig: str | None = None,
) -> Fold:
    """What folding the writes that run before ``check`` does to ``attrs`` (left untouched):
    (the assignments in order, caveats, notes by attribute). The result is shared: read-only.

    ``memo`` (one per triage, whose facts are fixed) caches guard truths. The
    fold depends only on the values of :func:`write_dependencies` and on the facts
    its guards and values read (by value: a fold shows no fact's provenance), so it
    is memoised process-wide on them (bounded), one entry per way the facts answered
    those reads: a new GPU or model reuses every fold that never asked about it.
    A :class:`FactsTrace` for ``facts`` skips that table (the caller records the reads;
    :mod:`service.engine.evaluate.fold_slice` memoises slices of the fold that way).
    ``facts_sig``: :func:`~service.engine.cache.facts_signature` of ``facts`` when known
    (the facts' answers are then those every evaluation under them shares).
    """
    frozen = frozenset(names)
    if isinstance(facts, FactsTrace):
        return _fold(store, version, check, _overlay(attrs), facts, frozen, memo)
    deps = write_dependencies(store, version, check, frozen, frozenset(facts))
    key = (
        release_key(store, version, "folds"),
        check.id,
        tuple(sorted(frozen)),
        tuple(value_key(attrs.get(d)) for d in deps),
    )
    variants = _FOLDS.get(key) or ()
    sigs = shared_answers(facts_sig) if facts_sig is not None else {}
    for reads, fold in variants:
        if reads_match(reads, facts, sigs):
            return fold
    trace = FactsTrace(facts, sigs)
    trace.provenance = False
    plan, _ = fold_plan(store, version, check, frozen, trace.names())
    lkey, values = key[:3], key[3]
    last = _LAST.get(lkey)
    prior = None
    if last is not None and last[0] is plan:  # each write no differing name reaches repeats
        dirty = {d for d, v, old in zip(deps, values, last[1], strict=True) if v != old}
        prior = (last[2], dirty)
    fold, effects = fold_effects(
        version, check, plan, _overlay(attrs), trace, frozen, memo, plan_reads(plan), prior
    )
    _LAST.put(lkey, (plan, values, effects))
    _FOLDS.put(key, (*variants, (trace.snapshot(), fold))[-_FOLD_VARIANTS:])
    return fold


def _overlay(attrs: Mapping[str, Value]) -> Overlay[str, Value]:
    """``attrs`` made writable without touching it: writes land in a fresh front map and
    ``attrs`` is only read."""
    return Overlay(attrs)


#: how many rounds of "the attributes earlier writes read" join the fold
_CLOSURE_DEPTH = 2
#: at most this many writes are folded for one check
_MAX_FOLDED = 400


def fold_plan(
    store: Store,
    version: str,
    check: Check,
    names: frozenset[str],
    fact_names: Collection[str] = frozenset(),
) -> tuple[tuple[tuple[chain.Write, resolution.PreparedWrite], ...], tuple[str, ...]]:
    """The writes folded before ``check`` in validation order, prepared, and the attributes
    that decide how they fold (cached per release). ``fact_names`` is read by membership
    only (a :meth:`FactsTrace.names` records those reads).

    The writes are those of ``names`` and, up to :data:`_CLOSURE_DEPTH` rounds, of the
    attributes their values and guards read (a declaration reading a value an earlier
    hook declared sees that declaration). They are sorted by pipeline position, so each
    is evaluated over exactly the writes that ran before it.
    """

    def build(
        keep: Collection[str],
    ) -> tuple[tuple[tuple[chain.Write, resolution.PreparedWrite], ...], tuple[str, ...]]:
        deps = set(names)
        seen: set[str] = set()
        writes: dict[tuple[str, int, str], tuple[chain.Write, resolution.PreparedWrite]] = {}
        frontier = set(names)
        for _ in range(_CLOSURE_DEPTH + 1):
            added: set[str] = set()
            for attr in sorted(frontier - seen):
                seen.add(attr)
                for w in chain.earlier_writes(store, version, attr, check):
                    if len(writes) >= _MAX_FOLDED:
                        break
                    pw = resolution.prepare_write(store, version, w, keep)
                    writes[(w.path, w.line, attr)] = (w, pw)
                    for text in [pw.value or "", *(g for g, _ in pw.all_guards(False))]:
                        try:
                            added |= referenced_names(text) if text else set()
                        except Exception:  # unparsable: evaluated as unknown
                            continue
            deps |= added
            frontier = added - seen
            if not frontier:
                break
        order = sorted(
            writes.values(),
            key=lambda p: (
                p[0].rank if p[0].rank is not None else -1.0,
                p[0].path,
                p[0].line,
                p[0].attr,
            ),
        )
        return tuple(order), tuple(sorted(deps))

    key = (*release_key(store, version, "fold-plan"), check.id, tuple(sorted(names)))
    # the plan reads the fact keys only by membership (which locals and helper calls a
    # fact answers): other fact sets that answer alike share the plan
    if isinstance(fact_names, FactNames):  # traced: the plan's questions reach the trace
        whole = fact_names.trace.key_set()

        def traced() -> tuple[
            tuple[tuple[tuple[chain.Write, resolution.PreparedWrite], ...], tuple[str, ...]],
            Reads,
        ]:
            plan, seen = cached_on_members_seen(key, whole, build)
            return plan, member_reads(seen)

        plan, asked = cached((*key, "seen", hash(whole)), traced)
        fact_names.trace.replay(asked)
        return plan
    if not isinstance(fact_names, frozenset):
        return cached_on_members(key, fact_names, build)
    return cached((*key, hash(fact_names)), lambda: cached_on_members(key, fact_names, build))


def write_fails(
    store: Store,
    version: str,
    check: Check,
    write: chain.Write,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
) -> bool:
    """Whether a guard of ``write`` (an earlier write of ``check``'s fold) is false under
    ``attrs`` and ``facts``, so that it cannot have run (a write under ``is_hip`` on an
    NVIDIA GPU). False when it may run, or is not in the fold's plan."""
    plan, _ = fold_plan(store, version, check, frozenset({write.attr}), facts.keys())
    env = Env(attrs, facts)
    for w, pw in plan:
        if (w.attr, w.path, w.line) == (write.attr, write.path, write.line):
            same_fn = w.function == check.function and w.path == check.path
            return holds(pw.all_guards(same_fn), env, None) is False
    return False


def write_dependencies(
    store: Store,
    version: str,
    check: Check,
    names: frozenset[str],
    fact_names: frozenset[str] = frozenset(),
) -> tuple[str, ...]:
    """The attributes that decide how the earlier writes of ``names`` fold in (cached):
    ``names`` themselves and every attribute read by the folded writes' guards and values."""
    return fold_plan(store, version, check, names, fact_names)[1]


def _fold(
    store: Store,
    version: str,
    check: Check,
    attrs: MutableMapping[str, Value],
    facts: Mapping[str, Value],
    names: frozenset[str],
    memo: dict[tuple[Any, ...], object] | None,
) -> Fold:
    """The uncached fold: (assignments in order, caveats, notes); ``attrs`` is scratch space
    (assigned in place). Only the writes of ``names`` are reported (notes and caveats);
    the others are folded so that later writes read what ran before them."""
    fact_names = facts.names() if isinstance(facts, FactsTrace) else frozenset(facts)
    plan, _ = fold_plan(store, version, check, names, fact_names)
    return fold_effects(version, check, plan, attrs, facts, names, memo, plan_reads(plan))[0]
