"""The writes of earlier validation steps, folded into the attributes a check reads.

A write whose guards hold (``NEXTN`` → ``EAGLE``, say) sets the attribute before the
check runs; one whose guard cannot be decided is reported as "may be changed at path:line
when …" and its value becomes unknown rather than guessed. The writes are taken in
validation order (:mod:`service.engine.evaluate.chain`) and prepared by
:mod:`service.engine.evaluate.resolution`; the fold is memoised on the values that decide it.
Used by :func:`service.engine.evaluate.path_condition.evaluate_path`.
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
from service.engine.evaluate.guard_memo import holds, value_of
from service.engine.evaluate.memo_keys import value_key, value_signature
from service.engine.evaluate.slice_plan import Plan, plan_reads
from service.engine.expr.interpreter import (
    UNKNOWN,
    Env,
    Provenance,
    Value,
    referenced_names,
)
from service.engine.expr.overlay import Overlay
from service.engine.expr.trace import FactNames, FactsTrace, Reads, member_reads, reads_match

_MISSING = object()

Fold = tuple[tuple[tuple[str, Value], ...], list[str], dict[str, list[str]]]
#: what one write did in a fold: (the value it assigned or ``None``, its note, its caveat,
#: the facts it read)
Effect = tuple[Value | None, str, str, Reads]

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
) -> tuple[list[str], dict[str, list[str]]]:
    """Fold the writes that run before ``check`` into ``attrs`` (in place).

    Returns (caveats, notes by attribute); see :func:`fold_earlier_writes`.
    """
    assigned, caveats, notes = fold_earlier_writes(store, version, check, attrs, facts, names, memo)
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
    sigs: dict[object, object] = {}
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


_NO_READS: Reads = ()


def fold_effects(
    version: str,
    check: Check,
    plan: tuple[tuple[chain.Write, resolution.PreparedWrite], ...],
    attrs: MutableMapping[str, Value],
    facts: Mapping[str, Value],
    names: Collection[str],
    memo: dict[tuple[Any, ...], object] | None,
    reads: tuple[tuple[str, ...] | None, ...] | None = None,
    prior: tuple[tuple[Effect, ...], set[str]] | None = None,
) -> tuple[Fold, tuple[Effect, ...]]:
    """Fold the prepared writes of ``plan`` (in its order) into ``attrs`` (scratch space,
    assigned in place): ((assignments in order, caveats, notes), what each write did),
    reporting the writes of ``names`` only. The facts each write read are recorded when
    ``facts`` is a :class:`FactsTrace`.

    ``reads``: per write, the names it reads (:func:`~.slice_plan.write_reads`; ``None``
    when not known), for the memo of effects (:func:`_effect`) and for ``prior``: (each
    write's effect when the same ``plan`` was folded for attributes differing from
    ``attrs`` only in the names of the set; that set). A write known to read none of the
    set, whose facts answer as they did, repeats its effect unevaluated (its fact reads are
    recorded again). A write evaluated again whose assignment differs adds its attribute
    to the set."""
    done: list[tuple[str, Value]] = []
    caveats: list[str] = []
    notes: dict[str, list[str]] = {}
    effects: list[Effect] = []
    trace = facts if isinstance(facts, FactsTrace) else None
    env = Env(attrs, facts)  # reads ``attrs`` as the assignments below change it
    for i, (w, pw) in enumerate(plan):
        effect: Effect | None = None
        before: Effect | None = None
        read = reads[i] if reads is not None else None
        if prior is not None:
            before, dirty = prior[0][i], prior[1]
            if (
                read is not None
                and dirty.isdisjoint(read)
                and (not before[3] or (trace is not None and trace.answers_alike(before[3])))
            ):
                effect = before
                if trace is not None and before[3]:
                    trace.replay(before[3])
        if effect is None:
            effect = _effect(version, check, w, pw, env, memo, trace, read)
            if before is not None and _assigns_otherwise(effect[0], before[0]):
                dirty.add(w.attr)
        effects.append(effect)
        value, note, caveat, _ = effect
        if value is not None:
            attrs[w.attr] = value
            done.append((w.attr, value))
        if w.attr in names:
            if note:
                notes.setdefault(w.attr, []).append(note)
            if caveat:
                caveats.append(caveat)
    return (tuple(done), caveats, notes), tuple(effects)


def _assigns_otherwise(a: Value | None, b: Value | None) -> bool:
    if a is None or b is None:
        return a is not b
    return value_signature(a) != value_signature(b)


# (release, the prepared write, its place and kind, the values of the names it reads) ->
# (the prepared write, its effects, one per way the facts answered what it asked them)
_EFFECTS: LRUCache[tuple[resolution.PreparedWrite, tuple[Effect, ...]]] = LRUCache(
    "evaluation.write_effects", 30_000
)
_EFFECT_VARIANTS = 4


def _effect(
    version: str,
    check: Check,
    w: chain.Write,
    pw: resolution.PreparedWrite,
    env: Env,
    memo: dict[tuple[Any, ...], object] | None,
    trace: FactsTrace | None,
    read: tuple[str, ...] | None = None,
) -> Effect:
    """What write ``w`` does in ``env`` (:data:`Effect`), with the facts it read from
    ``trace`` (the facts of ``env``, when traced).

    Memoised when the facts are traced and the names the write reads are known (``read``,
    sorted): an effect
    is deterministic in the values those names have where the write runs and in the facts
    it asked, so a write in the slices of many checks' plans is evaluated once per such
    values (the facts it asked are recorded again when reused)."""
    if trace is None:
        return (*_effect_of(version, check, w, pw, env, memo), _NO_READS)
    key: tuple[Any, ...] | None = None
    variants: tuple[Effect, ...] = ()
    if read is not None:
        same_fn = w.function == check.function and w.path == check.path
        values = tuple(value_key(env.attrs.get(n)) for n in read)
        key = (version, id(pw), w.path, w.line, w.attr, w.rank, same_fn, trace.provenance, values)
        got = _EFFECTS.get(key)
        if got is not None and got[0] is pw:
            variants = got[1]
            for effect in variants:
                if not effect[3] or trace.answers_alike(effect[3]):
                    if effect[3]:
                        trace.replay(effect[3])
                    return effect
    saved = trace.frame()
    try:
        found = _effect_of(version, check, w, pw, env, memo)
    finally:
        reads = trace.merge(saved)
    effect = (*found, reads)
    if key is not None:
        _EFFECTS.put(key, (pw, (*variants, effect)[-_EFFECT_VARIANTS:]))
    return effect


def _effect_of(
    version: str,
    check: Check,
    w: chain.Write,
    pw: resolution.PreparedWrite,
    env: Env,
    memo: dict[tuple[Any, ...], object] | None,
) -> tuple[Value | None, str, str]:
    """What write ``w`` does in ``env``: (the value it assigns or ``None``, a note about it
    and a caveat, each ``""`` when none)."""
    attr = w.attr
    same_fn = w.function == check.function and w.path == check.path
    guards = pw.all_guards(same_fn)
    held = holds(guards, env, memo)
    if held is False:
        return None, "", ""
    when = " and ".join(cond if pol else f"not ({cond})" for cond, pol in guards) or "always"
    where = f"{w.path}:{w.line}"
    if w.rank is None:
        return (
            None,
            f"may be changed at {where} when {when} (order relative to the check unknown)",
            "",
        )
    if held is True and not pw.reached and not same_fn:
        held = UNKNOWN  # in a helper of a step called from several places: guards unknown
    value = value_of(pw.value, env, memo) if pw.value else UNKNOWN
    if value is UNKNOWN and _transforms_itself(pw.value, attr):
        # e.g. model_path = _resolve_or_download(self.model_path): same meaning, new form
        return None, f"rewritten at {where} from its own value", ""
    if held is True and value is not UNKNOWN:
        written = resolution.write_provenance(version, w, value, when)
        return Value(value, Provenance("write", written)), f"set to {value!r} at {where}", ""
    msg = f"may be changed at {where} when {when}"
    assigned = None
    if held is True:
        unknown = f"set at {where} to `{pw.value}`, not known statically"
        assigned = Value(UNKNOWN, Provenance("write", unknown))
    return assigned, msg, f"`{attr}` {msg}"


def _transforms_itself(value_src: str | None, attr: str) -> bool:
    """Does the written expression read the attribute it writes (a normalisation)?"""
    if not value_src:
        return False
    try:
        return attr in referenced_names(value_src)
    except Exception:
        return False
