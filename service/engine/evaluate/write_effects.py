"""What each earlier write does when a plan is folded (:func:`fold_effects`).

A write's :data:`Effect` is the value it assigns (``None``: none), a note, a caveat and
the facts it read. It is deterministic in the values of the names the write reads where
it runs and in the facts it asked, so it is memoised on those (:func:`_effect`): a write in
the slices of many checks' plans is evaluated once per such values.

A plan folded again for attributes differing from its last fold in a few names (a fix
candidate's) repeats every effect those names cannot reach: the fold goes straight to the
writes that read a differing name, those whose facts answer otherwise and those whose reads
are not known, in plan order, each over the values the writes before it left; a write whose
assignment changes makes its attribute's later readers due too. The cost is then that of
the writes reached, not of the plan's length.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, MutableMapping
from itertools import compress
from operator import itemgetter, or_
from typing import Any

from kb.code_types import Check
from service.engine.cache import LRUCache
from service.engine.evaluate import chain, resolution
from service.engine.evaluate.guard_memo import holds, value_of
from service.engine.evaluate.memo_keys import value_key, value_signature
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Value, referenced_names
from service.engine.expr.overlay import Overlay
from service.engine.expr.trace import FactsTrace, Reads

__all__ = ["Effect", "Fold", "fold_effects"]

Fold = tuple[tuple[tuple[str, Value], ...], list[str], dict[str, list[str]]]
#: what one write did in a fold: (the value it assigned or ``None``, its note, its caveat,
#: the facts it read)
Effect = tuple[Value | None, str, str, Reads]
Plan = tuple[tuple[chain.Write, resolution.PreparedWrite], ...]
#: per write, the names it reads (``None``: not known)
WriteReads = tuple[tuple[str, ...] | None, ...]
_Readers = tuple[dict[str, tuple[int, ...]], tuple[int, ...], tuple[str, ...]]

_NO_READS: Reads = ()


def fold_effects(
    version: str,
    check: Check,
    plan: Plan,
    attrs: MutableMapping[str, Value],
    facts: Mapping[str, Value],
    names: Collection[str],
    memo: dict[tuple[Any, ...], object] | None,
    reads: WriteReads | None = None,
    prior: tuple[tuple[Effect, ...], set[str]] | None = None,
) -> tuple[Fold, tuple[Effect, ...]]:
    """Fold the prepared writes of ``plan`` (in its order) into ``attrs`` (scratch space,
    assigned in place when every write is evaluated): ((assignments in order, caveats,
    notes), what each write did), reporting the writes of ``names`` only. The facts each
    write read are recorded when ``facts`` is a :class:`FactsTrace`.

    ``reads``: per write, the names it reads (:func:`~.slice_plan.write_reads`; ``None``
    when not known), for the memo of effects (:func:`_effect`) and for ``prior``: (each
    write's effect when the same ``plan`` was folded for attributes differing from
    ``attrs`` only in the names of the set; that set). With both, only the writes that set
    reaches are evaluated (:func:`_reached`); the others repeat their effects (their fact
    reads are recorded again)."""
    trace = facts if isinstance(facts, FactsTrace) else None
    if prior is not None and reads is not None:
        effects = _reached(version, check, plan, attrs, facts, memo, reads, prior)
        if trace is not None:  # in plan order, as the loop below records them
            for reads_of in filter(None, map(_READS, effects)):
                trace.replay(reads_of)
    else:
        out: list[Effect] = []
        env = Env(attrs, facts)  # reads ``attrs`` as the assignments below change it
        for i, (w, pw) in enumerate(plan):
            effect = _effect(
                version, check, w, pw, env, memo, trace, reads[i] if reads is not None else None
            )
            out.append(effect)
            if effect[0] is not None:
                attrs[w.attr] = effect[0]
        effects = tuple(out)
        if trace is not None:
            _UNDER.put(id(effects), (effects, trace.facts_token))
    return _folded(plan, effects, names), effects


def _folded(plan: Plan, effects: tuple[Effect, ...], names: Collection[str]) -> Fold:
    """The fold ``effects`` make: (assignments in order, caveats and notes about the writes
    of ``names``)."""
    attr_of = _attrs_of(plan)
    values = list(map(_VALUE, effects))
    done = tuple(compress(zip(attr_of, values, strict=True), values))  # a Value is true
    caveats: list[str] = []
    notes: dict[str, list[str]] = {}
    said = map(or_, map(bool, map(_NOTE, effects)), map(bool, map(_CAVEAT, effects)))
    for i in compress(range(len(effects)), said):  # the few writes with a note or caveat
        attr = attr_of[i]
        if attr in names:
            _, note, caveat, _ = effects[i]
            if note:
                notes.setdefault(attr, []).append(note)
            if caveat:
                caveats.append(caveat)
    return done, caveats, notes


_VALUE, _NOTE, _CAVEAT, _READS = (itemgetter(i) for i in range(4))
#: id of a plan -> (the plan, the attribute each of its writes assigns)
_ATTRS: LRUCache[tuple[Plan, tuple[str, ...]]] = LRUCache("evaluation.plan_attrs", 4_096)


def _attrs_of(plan: Plan) -> tuple[str, ...]:
    """The attribute each write of ``plan`` assigns; cached per plan object."""
    got = _ATTRS.get(id(plan))
    if got is not None and got[0] is plan:
        return got[1]
    found = tuple(w.attr for w, _ in plan)
    _ATTRS.put(id(plan), (plan, found))
    return found


def _same(a: Effect, b: Effect) -> bool:
    """Do two effects of one write fold alike (assignments alike, same texts and reads)?"""
    return a is b or (
        a[1] == b[1] and a[2] == b[2] and a[3] == b[3] and not _assigns_otherwise(a[0], b[0])
    )


#: id of a plan -> (the plan, (name -> the indices of the writes reading it in plan order,
#: the indices of the writes whose reads are not known, the attribute of each write))
_READERS: LRUCache[tuple[Plan, _Readers]] = LRUCache("evaluation.plan_readers", 1_024)


def _readers(plan: Plan, reads: WriteReads) -> _Readers:
    """The writes of ``plan`` reading each name, by index in plan order, those whose reads
    are not known (any name may reach them) and the attribute each assigns. Cached per plan
    object."""
    got = _READERS.get(id(plan))
    if got is not None and got[0] is plan:
        return got[1]
    readers: dict[str, list[int]] = {}
    unknown: list[int] = []
    for i, read in enumerate(reads):
        if read is None:
            unknown.append(i)
        for name in read or ():
            readers.setdefault(name, []).append(i)
    found = (
        {name: tuple(ids) for name, ids in readers.items()},
        tuple(unknown),
        _attrs_of(plan),
    )
    _READERS.put(id(plan), (plan, found))
    return found


def _reached(
    version: str,
    check: Check,
    plan: Plan,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    memo: dict[tuple[Any, ...], object] | None,
    reads: WriteReads,
    prior: tuple[tuple[Effect, ...], set[str]],
) -> tuple[Effect, ...]:
    """Each write's effect in ``plan`` when only the writes that ``prior``'s differing
    names reach, those whose facts answer otherwise and those whose reads are not known are
    evaluated, in plan order (as :func:`fold_effects`' loop would evaluate them)."""
    readers, unknown, attr_of = _readers(plan, reads)
    effects = list(prior[0])
    trace = facts if isinstance(facts, FactsTrace) else None
    queued = set(unknown)
    for name in prior[1]:
        queued.update(readers.get(name, ()))
    token = trace.facts_token if trace is not None else None
    verified = _UNDER.get(id(prior[0]))
    if token is None or verified is None or verified[0] is not prior[0] or verified[1] is not token:
        # made under other facts: each effect that read them is due unless they answer alike
        for i in compress(range(len(effects)), map(_READS, effects)):
            if trace is None or not trace.answers_alike(effects[i][3]):
                queued.add(i)
    changed = False
    if queued:  # evaluated again in plan order, each over what the writes before it assigned
        due = sorted(queued)  # a heap
        values = list(map(_VALUE, effects))
        front: dict[str, Value] = {}  # what the writes before the next one due assigned
        if type(attrs) is Overlay and not attrs.front:  # scratch space not written here
            attrs = attrs.back
        env = Env(Overlay(attrs, front), facts)
        at = 0
        saved = trace.frame() if trace is not None else None
        try:
            while due:
                i = heapq.heappop(due)
                if i > at:  # the assignments (not ``None``) of the writes in between
                    between = values[at:i]
                    front.update(compress(zip(attr_of[at:i], between, strict=True), between))
                    at = i
                w, pw = plan[i]
                effect = _effect(version, check, w, pw, env, memo, trace, reads[i])
                if _same(effect, effects[i]):
                    continue  # the last effect stands
                changed = True
                if _assigns_otherwise(effect[0], effects[i][0]):
                    for j in readers.get(w.attr, ()):  # its later readers are due too
                        if j > i and j not in queued:
                            queued.add(j)
                            heapq.heappush(due, j)
                effects[i] = effect
                values[i] = effect[0]
        finally:
            if trace is not None and saved is not None:
                trace.reads = saved  # the effects' reads are recorded in plan order after
    out = tuple(effects) if changed else prior[0]
    if token is not None:
        _UNDER.put(id(out), (out, token))
    return out


#: id of an effects tuple -> (the tuple, the token of the facts (:attr:`FactsTrace.facts_token`)
#: that answer its reads alike): its next fold under them need not ask again
_UNDER: LRUCache[tuple[tuple[Effect, ...], object]] = LRUCache("evaluation.effects_facts", 2_048)


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
