"""The earlier writes folded on demand, one attribute at a time (a *slice* of the fold).

:func:`~service.engine.evaluate.fold.fold_plan` orders every write that may decide the
attributes a check reads. A rule card derived from that check reads only some of them
before its verdict is settled (``when`` stops at its first false operand), so folding the
whole plan computes values, and asks the facts questions, that the verdict never uses. A
new GPU then misses a memoised verdict because of a write guard about the GPU that decides
an attribute the card did not even read.

The *slice* of one attribute is its writes in the plan and, transitively, the writes of
every attribute their guards and values read. No write outside the slice reads or writes
an attribute the slice reads, so folding the slice alone, in plan order, gives the
attribute exactly the value the whole fold gives it. :class:`FoldedView` folds the slice of
each attribute on its first read; :func:`fold_attr` memoises a slice's fold on the values
of the attributes it reads and on the facts it asked about.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator, Mapping
from typing import Any, cast

from kb.code_types import Check
from kb.errors import UnsafeExpression
from kb.store import Store
from service.engine.cache import LRUCache, on_clear_all, release_key
from service.engine.evaluate.fold import fold_plan
from service.engine.evaluate.literal_classes import Tests, answers_signature
from service.engine.evaluate.memo_keys import value_key, value_signature
from service.engine.evaluate.path_classes import (
    CLASSED,
    Origin,
    class_signature,
    moved_entry,
    moved_paths,
    origin_of,
)
from service.engine.evaluate.slice_plan import Plan, Slice, plan_slice
from service.engine.evaluate.write_effects import Effect, fold_effects
from service.engine.expr.interpreter import Provenance, Value
from service.engine.expr.overlay import Overlay
from service.engine.expr.trace import FactsTrace, Reads, answered_absent

__all__ = [
    "FoldedView",
    "Made",
    "Seen",
    "ViewReads",
    "fold_attr",
    "inherited",
    "seen_through",
    "view_answer",
]

#: a slice's fold as kept: (assignments in order, caveats about its writes)
SliceFold = tuple[tuple[tuple[str, Value], ...], tuple[str, ...]]
#: the folds made for one set of attributes and facts: slice digest -> (facts read, fold,
#: the names the slice reads)
Made = dict[bytes, tuple[Reads, SliceFold, frozenset[str]]]
#: the reads an evaluation made through a :class:`FoldedView` (:meth:`FoldedView.reads_of`)
ViewReads = tuple[tuple[str, "Tests | None", object], ...]


# (release, the slice's digest, values of the names it reads, model paths by class when the
# writes allow it) -> its fold, per way the facts answered the fold's questions, with the
# paths it was made with
_SLICE_FOLDS: LRUCache[tuple[tuple[Reads, SliceFold, Origin], ...]] = LRUCache(
    "evaluation.fold_slice_results", 50_000
)
_VARIANTS = 8
# (release, the slice's digest) -> its last fold made afresh: (the values of the names it
# reads, each write's effect with the facts it read); a fold for values differing in a few
# names, or under facts answering a few writes otherwise, evaluates only the writes those
# reach (:func:`~service.engine.evaluate.write_effects.fold_effects`)
_LAST: LRUCache[tuple[tuple[str, ...], tuple[Effect, ...]]] = LRUCache(
    "evaluation.fold_slice_last", 20_000
)


def fold_attr(
    store: Store,
    version: str,
    check: Check,
    names: frozenset[str],
    attr: str,
    attrs: Mapping[str, Value],
    trace: FactsTrace,
    memo: dict[tuple[Any, ...], object] | None = None,
    plan: Plan | None = None,
    made: Made | None = None,
) -> tuple[Slice, SliceFold]:
    """The fold of ``attr``'s slice of the plan for ``names`` before ``check``: (the slice,
    (its assignments in order, caveats about the writes of the slice)).
    ``attrs`` is only read.

    Memoised on the values of the names the slice reads (the model paths by class when
    the slice's writes use them only so, :mod:`~service.engine.evaluate.path_classes`: a
    fold made for another path then has its assigned paths replaced) and, per variant, on
    the fact answers it rested on (facts read by value: a fold shows no fact's origin); those
    answers join ``trace`` whether the fold is computed or reused. ``plan``: the plan as
    :func:`~service.engine.evaluate.fold.fold_plan` gave it for ``trace`` already (its
    questions about the facts are then in ``trace``). ``made``: the folds already made for
    these same ``attrs`` and facts (by the slice's digest), reused without a key; filled.
    """
    if plan is None:
        plan, _ = fold_plan(store, version, check, names, trace.names())
    piece = plan_slice(check, plan, attr)
    if made is not None:
        done = made.get(piece.ident)
        if done is not None:
            if not isinstance(attrs, dict):  # a recorder: the reads a fold makes
                for d in piece.reads:
                    attrs.get(d)
            trace.replay(done[0])
            return piece, done[1]
    piece, fold, reads = _fold_or_reuse(store, version, check, names, piece, attrs, trace, memo)
    if made is not None:
        made[piece.ident] = (reads, fold, piece.read_set)
    return piece, fold


def inherited(made: Made, changed: set[str]) -> Made:
    """The folds of ``made`` (made for other attributes under the same facts) whose slices
    read none of ``changed``: attributes differing from those only in ``changed`` fold
    them alike."""
    return {k: v for k, v in made.items() if changed.isdisjoint(v[2])}


def _fold_or_reuse(
    store: Store,
    version: str,
    check: Check,
    names: frozenset[str],
    piece: Slice,
    attrs: Mapping[str, Value],
    trace: FactsTrace,
    memo: dict[tuple[Any, ...], object] | None,
) -> tuple[Slice, SliceFold, Reads]:
    """:func:`fold_attr` through its memo table: (the slice, its fold, the fact answers
    it rested on)."""
    # model paths by class when the slice's writes allow it (see path_classes)
    by_class, absent = piece.paths
    by_class = by_class and not CLASSED.isdisjoint(piece.reads)
    values = tuple(value_key(attrs.get(d)) for d in piece.reads)
    key = (
        release_key(store, version, "fold-slice"),
        piece.ident,  # not the check: the slices of many checks' plans are the same writes
        tuple(
            class_signature(attrs, d, provenance=False, among=piece.reads) if d in CLASSED else v
            for d, v in zip(piece.reads, values, strict=True)
        )
        if by_class
        else values,
    )
    variants = _SLICE_FOLDS.get(key) or ()
    for reads, fold, origin in variants:
        if trace.answers_alike(reads):
            served = _rebased(fold, origin, attrs)
            if served is None:  # quotes another path where it cannot be replaced
                continue
            trace.replay(reads)
            return piece, served, reads
    saved, provenance = trace.frame(), trace.provenance
    trace.provenance = False
    lkey = (key[0], piece.ident)
    try:
        # the plan's membership questions join this variant's reads: another set of fact
        # names may make another plan under the same key
        fold_plan(store, version, check, names, trace.names())
        last = _LAST.get(lkey)
        prior = None
        if last is not None:  # each write not reached by what differs repeats its effect
            dirty = {d for d, v, old in zip(piece.reads, values, last[0], strict=True) if v != old}
            prior = (last[1], dirty)
        (assigned, caveats, _), effects = fold_effects(
            version,
            check,
            piece.writes,
            Overlay(attrs),
            trace,
            piece.written,
            memo,
            piece.write_reads,
            prior,
        )
        # the same few caveat texts recur in every variant: one copy each
        fold = (assigned, tuple(map(sys.intern, caveats)))
    finally:
        trace.provenance = provenance
        reads = trace.merge(saved)
    _LAST.put(lkey, (values, effects))
    if not by_class:
        _SLICE_FOLDS.put(key, (*variants, (reads, fold, ()))[-_VARIANTS:])
    elif answered_absent(reads, absent):  # else a path came from a fact: not kept
        origin = origin_of(piece.reads, attrs)
        _SLICE_FOLDS.put(key, (*variants, (reads, fold, origin))[-_VARIANTS:])
    return piece, fold, reads


def _rebased(fold: SliceFold, origin: Origin, attrs: Mapping[str, Value]) -> SliceFold | None:
    """A fold made with the paths ``origin``, for the paths of ``attrs`` (of the same
    classes): each path assigned is the one taking its place. ``None`` when a caveat or
    another assignment quotes an old path."""
    moved = moved_paths(origin, attrs)
    if not moved:
        return fold
    assigned, caveats = fold
    if any(old in c for old in moved for c in caveats):
        return None
    out: list[tuple[str, Value]] = []
    for name, v in assigned:
        entry = moved_entry(name, v.value, v.provenance.detail, moved)
        if entry is None:
            return None
        if entry[0] is not v.value or entry[1] != v.provenance.detail:
            v = Value(entry[0], Provenance(v.provenance.kind, entry[1]))
        out.append((name, v))
    return tuple(out), caveats


_UNSET = object()
_ABSENT = object()
#: (id of a slice, id of its fold) -> (the slice, the fold, what it decides)
_DECIDED: dict[tuple[int, int], tuple[Slice, SliceFold, Decided]] = {}
_DECIDED_MAX = 50_000
#: each attribute a slice's fold decides, with its value (``_ABSENT``: no write assigns it)
#: and the caveats about it
Decided = tuple[tuple[str, object, tuple[str, ...]], ...]
# it holds the slices and folds it was made from: emptied with the engine's caches
on_clear_all(_DECIDED.clear)


def _decided(piece: Slice, fold: SliceFold) -> Decided:
    """What ``fold`` (of ``piece``) decides, per attribute: the last assignment wins.
    Cached per fold object (views of many cards read the same folds)."""
    key = (id(piece), id(fold))
    got = _DECIDED.get(key)
    if got is not None and got[0] is piece and got[1] is fold:
        return got[2]
    assigned, caveats = fold
    final: dict[str, object] = dict.fromkeys(piece.decides, _ABSENT)
    final.update(assigned)
    about: dict[str, list[str]] = {}  # caveats name their attribute first: "`attr` ..."
    for c in caveats:
        about.setdefault(c[1 : c.find("` ", 1)], []).append(c)
    out = tuple((attr, value, tuple(about.get(attr, ()))) for attr, value in final.items())
    if len(_DECIDED) >= _DECIDED_MAX:
        _DECIDED.clear()
    _DECIDED[key] = (piece, fold, out)
    return out


#: one attribute as a check's folded view shows it (:func:`seen_through`): (its value,
#: ``None`` when absent; the caveats about it; the slice folded for it, ``None`` when none
#: was; the facts that fold rested on)
Seen = tuple[Value | None, tuple[str, ...], Slice | None, Reads]


def seen_through(
    store: Store,
    version: str,
    check: Check,
    names: frozenset[str],
    plan: Plan,
    attr: str,
    attrs: Mapping[str, Value],
    trace: FactsTrace,
    memo: dict[tuple[Any, ...], object] | None = None,
    made: Made | None = None,
    into: dict[str, Seen] | None = None,
) -> Seen:
    """``attr`` as a :class:`FoldedView` of ``check`` over ``attrs`` shows it: the fold of
    its slice decides it (``trace`` gets the facts that fold asked, returned as well).
    That fold decides every attribute its writes read too, each as its own slice would
    (the slices are closed): each not in ``into`` yet is put there, seen the same way."""
    if attr not in names:
        return attrs.get(attr), (), None, ()
    saved = trace.frame()
    try:
        piece, fold = fold_attr(store, version, check, names, attr, attrs, trace, memo, plan, made)
    except UnsafeExpression as exc:  # a write's guard outside the whitelist
        trace.merge(saved)
        return attrs.get(attr), (f"earlier writes not folded in: {exc.message}",), None, ()
    reads = trace.merge(saved)
    found: Seen | None = None
    for name, value, about in _decided(piece, fold):
        seen = (attrs.get(name) if value is _ABSENT else cast(Value, value), about, piece, reads)
        if name == attr:
            found = seen
        if into is not None and name in names:
            into.setdefault(name, seen)
    return found if found is not None else (attrs.get(attr), (), piece, reads)


class FoldedView(Mapping[str, Value]):
    """``attrs`` as ``check`` sees them: each attribute of ``names`` has its earlier writes
    folded in (:func:`fold_attr`) when first read, and so has every attribute that slice
    decides (read later, it needs no fold of its own). The caveats about the attributes
    read so far collect in :attr:`caveats`, in the order they were read. Views of the same
    ``attrs`` and facts (the cards judged for one command) may share ``made``, the slice
    folds made so far.

    Every attribute read is kept in :attr:`seen` (first-read order) with the value read,
    ``None`` when absent, and the caveats its first read added: an evaluation over the
    view reads nothing else of the attributes (:meth:`reads_of`). Iterating or sizing the
    view sets :attr:`whole`; :meth:`rests_on` gives every attribute the reads so far rest
    on."""

    __slots__ = (
        "_args",
        "_attrs",
        "_done",
        "_made",
        "_memo",
        "_names",
        "_pending",
        "_plan",
        "_trace",
        "caveats",
        "notes_of",
        "seen",
        "slices",
        "whole",
    )

    def __init__(
        self,
        store: Store,
        version: str,
        check: Check,
        names: Collection[str],
        attrs: Mapping[str, Value],
        trace: FactsTrace,
        memo: dict[tuple[Any, ...], object] | None = None,
        made: Made | None = None,
    ) -> None:
        self._names = frozenset(names)
        self._made = made
        self._args = (store, version, check, self._names)
        self._attrs = attrs
        self._trace = trace
        self._memo = memo
        #: attribute -> its folded value (``_ABSENT``: no write assigns it)
        self._done: dict[str, object] = {}
        #: attribute -> caveats about it, reported on its first read
        self._pending: dict[str, list[str]] = {}
        #: the fold plan, asked once (its questions about the facts are in ``trace`` then)
        self._plan: Plan | None = None
        self.caveats: list[str] = []
        #: the slices folded so far: their writes are all the view evaluated
        self.slices: list[Slice] = []
        #: attribute -> the value its first read gave (``None``: absent), in read order
        self.seen: dict[str, Value | None] = {}
        #: attribute -> the caveats its first read added to :attr:`caveats`
        self.notes_of: dict[str, tuple[str, ...]] = {}
        self.whole = False

    def _fold(self, key: str) -> None:
        store, version, check, names = self._args
        try:
            if self._plan is None:
                self._plan = fold_plan(store, version, check, names, self._trace.names())[0]
            piece, fold = fold_attr(
                store,
                version,
                check,
                names,
                key,
                self._attrs,
                self._trace,
                self._memo,
                self._plan,
                self._made,
            )
        except UnsafeExpression as exc:  # a write's guard outside the whitelist
            self._done[key] = _ABSENT
            self._pending[key] = [f"earlier writes not folded in: {exc.message}"]
            return
        self.slices.append(piece)
        for attr, value, pending in _decided(piece, fold):
            if attr not in self._done:
                self._done[attr] = value
                if pending:
                    self._pending[attr] = list(pending)

    def _folded(self, key: str) -> object:
        """``key``'s folded value (``_ABSENT``: no write assigns it; ``_UNSET``: not folded,
        ``key`` being no name of the check's)."""
        if key not in self._done:
            if key not in self._names:
                return _UNSET
            self._fold(key)
        pending = self._pending.pop(key, None)
        if pending:
            self.caveats.extend(pending)
            self.notes_of[key] = tuple(pending)
        return self._done[key]

    def _look(self, key: str) -> Value | None:
        """``key``'s value as the check sees it (``None``: absent), recorded in :attr:`seen`."""
        got = self._folded(key)
        found = self._attrs.get(key) if got is _ABSENT or got is _UNSET else got
        if key not in self.seen:
            self.seen[key] = cast(Value | None, found)
        return cast(Value | None, found)

    def get(self, key: str, default: Any = None) -> Any:
        found = self._look(key)
        return default if found is None else found

    def __getitem__(self, key: str) -> Value:
        got = self.get(key, _UNSET)
        if got is _UNSET:
            raise KeyError(key)
        return got  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._look(key) is not None

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self._attrs.keys() | {k for k in self._names if k in self})

    def __len__(self) -> int:
        self.whole = True
        return sum(1 for _ in self)

    def reads_of(
        self, tests: Mapping[str, Tests | None] | None = None, *, noted: bool = False
    ) -> ViewReads:
        """The reads so far in read order, each as (attribute, how it is kept, the answer).

        Without ``tests``, each is kept exactly: its :func:`value_signature` and the caveats
        its first read added (how = ``None``). With ``tests`` (for a verdict that shows no
        value and no caveat), each attribute ``tests`` maps to its tests is kept as the
        answers to them, and every other as its value alone (how = ``()``). A view of other
        attributes answering these alike gives the evaluation the same answers.

        ``noted`` (for a verdict that shows values and caveats): each attribute ``tests``
        maps to its tests is kept as the answers to them with the caveats its first read
        added, every other exactly (how = ``None``)."""
        out: list[tuple[str, Tests | None, object]] = []
        for k, v in self.seen.items():
            if noted:
                how = tests.get(k) if tests else None
            else:
                how = None if tests is None else (tests.get(k) or ())
            out.append((k, how, self._answer(k, v, how, noted)))
        return tuple(out)

    def rests_on(self) -> frozenset[str]:
        """Every attribute the reads so far rest on: those read and those the folds of
        their slices read."""
        out = set(self.seen)
        for piece in self.slices:
            out.update(piece.reads)
        return frozenset(out)

    def _answer(self, key: str, v: Value | None, how: Tests | None, noted: bool) -> object:
        return view_answer(v, self.notes_of.get(key, ()), how, noted)


def view_answer(v: Value | None, notes: tuple[str, ...], how: Tests | None, noted: bool) -> object:
    """What an attribute seen as ``v`` with caveats ``notes`` answers to a read recorded by
    :meth:`FoldedView.reads_of` (``how``; ``noted``: the caveats count with the tests)."""
    if how is None:
        return (value_signature(v), notes)
    if not how:
        return value_key(v)
    return (answers_signature(v, how), notes) if noted else answers_signature(v, how)
