"""The facts as one evaluation reads them, so that its result can be reused under other
facts that answer those reads alike (:class:`FactsTrace`, :func:`reads_match`).

A triage's facts (the GPU, the model, the checkpoint, environment variables) change
with every new log, but a condition reads only a few of them: a rule card about the
page size never looks at the GPU. Keying a memo on the digest of *all* facts makes
every never-seen log recompute everything; keying it on what was read lets a card's
verdict under an H100 serve the same card under a B200 when the card never asked.

The evaluator (:class:`~service.engine.expr.interpreter.Env`) reads facts by
``facts.get(key)`` (a value: its ``repr`` and provenance are recorded) and by
``key in facts`` (membership only). Iterating the facts or taking their length
records a dependence on the whole key set. A read is recorded once, first answer kept.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from itertools import repeat
from operator import eq, itemgetter
from typing import Any, TypeVar, cast

from service.engine.cache import WHOLE_QUESTION, LRUCache

__all__ = [
    "FactNames",
    "answered_absent",
    "FactsTrace",
    "Reads",
    "fact_signature",
    "interned",
    "member_reads",
    "reads_match",
    "shared_answers",
    "values_only",
]

#: (what was asked, its answer): (_VALUE or _FULL, key) -> the value's signature;
#: (_MEMBER, key) -> present?; _WHOLE -> the key set
Reads = tuple[tuple[object, object], ...]

#: equal read tuples and equal questions, each stored once (plain dicts, emptied when full:
#: entries are immutable)
_INTERNED: dict[Reads, Reads] = {}
_QUESTIONS: dict[tuple[str, str], tuple[str, str]] = {}
_INTERNED_MAX = 100_000
T = TypeVar("T")


def interned(table: dict[T, T], item: T) -> T:
    """The one object of ``table`` equal to ``item`` (``item`` itself the first time)."""
    found = table.get(item)
    if found is None:
        if len(table) >= _INTERNED_MAX:
            table.clear()
        found = table[item] = item
    return found


_ABSENT = ("absent",)
_MEMBER = "in"
_VALUE = "="
_FULL = "=+"
_WHOLE = ("whole key set",)
#: facts signature -> those facts' answers so far (a ``sigs`` table, :func:`shared_answers`)
_SHARED: LRUCache[dict[object, object]] = LRUCache("expr.facts_answers", 64)
_SHARED_MAX = 100_000


def shared_answers(facts_sig: str) -> dict[object, object]:
    """The ``sigs`` table (the answers so far, :func:`reads_match`) of the facts whose
    :func:`~service.engine.cache.facts_signature` is ``facts_sig``, shared by every trace
    and match under them: each question and each recorded set of reads is answered once
    per set of facts, not once per evaluation. Emptied when large (its token changes)."""
    found = _SHARED.get(facts_sig)
    if found is None or len(found) > _SHARED_MAX:
        found = {}
        _SHARED.put(facts_sig, found)
    return found


_KEY_SET = ("key set",)  # a ``sigs`` entry: the facts' keys (never a recorded question)
_TOKEN = ("token",)  # a ``sigs`` entry: :attr:`FactsTrace.facts_token` (never a question)


def _question(kind: str, key: str) -> tuple[str, str]:
    """``(kind, key)``, one object per question (memo tables keep them by the thousand)."""
    return interned(_QUESTIONS, (kind, key))


def fact_signature(facts: Mapping[str, Any], key: str, provenance: bool = True) -> object:
    """What ``facts[key]`` says to an evaluation: its value's ``repr`` and (unless
    ``provenance`` is False) its provenance, or that it is absent."""
    v = facts.get(key)
    if v is None:
        return _ABSENT
    if not provenance:
        return repr(getattr(v, "value", v))
    prov = getattr(v, "provenance", None)
    return (
        repr(getattr(v, "value", v)),
        getattr(prov, "kind", None),
        getattr(prov, "detail", None),
    )


def _signature(
    facts: Mapping[str, Any], asked: tuple[str, str], sigs: dict[object, object]
) -> object:
    sig = sigs.get(asked)
    if sig is None:
        sig = sigs[asked] = fact_signature(facts, asked[1], asked[0] == _FULL)
    return sig


def _answer(facts: Mapping[str, Any], asked: object) -> object:
    """What ``facts`` answer to one recorded question."""
    if asked is _WHOLE:
        return frozenset(facts)
    kind, key = cast(tuple[str, str], asked)
    if kind == _MEMBER:
        return key in facts
    return fact_signature(facts, key, kind == _FULL)


class FactsTrace(Mapping[str, Any]):
    """``base`` (read-only) recording every read in :attr:`reads`.

    While :attr:`provenance` is False a value read records the value's ``repr`` only:
    for evaluations whose results never show where a fact came from (the guards of
    folded writes), so that facts equal in value but of another origin (another GPU
    profile with the same device type) answer alike. ``sigs`` may be shared by the
    traces of one set of facts (signatures cached per key).
    """

    __slots__ = ("base", "provenance", "reads", "_sigs")

    def __init__(self, base: Mapping[str, Any], sigs: dict[object, object] | None = None) -> None:
        self.base = base
        self.provenance = True
        self.reads: dict[object, object] = {}
        self._sigs = sigs if sigs is not None else {}

    def _value_read(self, key: str) -> None:
        asked = _question(_FULL if self.provenance else _VALUE, key)
        if asked not in self.reads:
            self.reads[asked] = _signature(self.base, asked, self._sigs)

    def get(self, key: str, default: Any = None) -> Any:
        self._value_read(key)
        return self.base.get(key, default)

    def __getitem__(self, key: str) -> Any:
        self._value_read(key)
        return self.base[key]

    def __contains__(self, key: object) -> bool:
        found = key in self.base
        if isinstance(key, str):  # fact keys are text: another key's answer needs no record
            self.reads.setdefault(_question(_MEMBER, key), found)
        return found

    def _whole(self) -> frozenset[str]:
        whole = frozenset(self.base)
        self.reads.setdefault(_WHOLE, whole)
        return whole

    def __iter__(self) -> Iterator[str]:
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())

    def names(self) -> FactNames:
        """The key set, read by membership only (for builds memoised on membership)."""
        return FactNames(self)

    def frame(self) -> dict[object, object]:
        """Start recording afresh; returns the reads so far, for :meth:`merge`."""
        saved, self.reads = self.reads, {}
        return saved

    def snapshot(self) -> Reads:
        """The reads so far, as a tuple shared with every equal one (memo tables keep many)."""
        return interned(_INTERNED, tuple(self.reads.items()))

    def merge(self, saved: dict[object, object]) -> Reads:
        """End a :meth:`frame`: returns the reads made inside it and adds them to ``saved``,
        which becomes :attr:`reads` again."""
        inner = self.snapshot()
        saved.update(self.reads)  # a question asked before has the same answer: kept in place
        self.reads = saved
        return inner

    def answers_alike(self, reads: Reads) -> bool:
        """Would these facts answer ``reads`` as recorded? (Not itself recorded.)"""
        return reads_match(reads, self.base, self._sigs)

    @property
    def facts_token(self) -> object:
        """A token of the cache of the facts' answers this trace shares (one per set of
        facts): two traces with the same token read the same facts. The token is small
        (kept by memo tables, it keeps no answers alive) and changes when the cache is
        emptied."""
        token = self._sigs.get(_TOKEN)
        if token is None:
            token = self._sigs[_TOKEN] = object()
        return token

    def key_set(self) -> frozenset[str]:
        """The facts' keys, not recorded as read (for cache keys of builds that record
        their own questions); one set per shared ``sigs``."""
        found = self._sigs.get(_KEY_SET)
        if found is None:
            found = self._sigs[_KEY_SET] = frozenset(self.base)
        return cast(frozenset[str], found)

    def replay(self, reads: Reads) -> None:
        """Record ``reads`` (those of a memoised result now reused) as made here. They were
        recorded under these facts, or found to be answered alike by them: a question asked
        already has the same answer, so they are simply added (a read keeps its place)."""
        self.reads.update(reads)


class FactNames(Collection[str]):
    """The key set of a :class:`FactsTrace`, read by membership (each answer recorded)."""

    __slots__ = ("trace",)

    def __init__(self, trace: FactsTrace) -> None:
        self.trace = trace

    def __contains__(self, key: object) -> bool:
        return key in self.trace

    def __iter__(self) -> Iterator[str]:
        return iter(self.trace)

    def __len__(self) -> int:
        return len(self.trace)


def member_reads(seen: Iterable[tuple[object, object]]) -> Reads:
    """The membership answers a build memoised on them rested on (see
    :func:`~service.engine.cache.cached_on_members_seen`) as this trace's reads, for
    :meth:`FactsTrace.replay` (convert once, replay often)."""
    return interned(
        _INTERNED,
        tuple(
            (_WHOLE if item is WHOLE_QUESTION else _question(_MEMBER, cast(str, item)), answer)
            for item, answer in seen
        ),
    )


def reads_match(reads: Reads, facts: Mapping[str, Any], sigs: dict[object, object]) -> bool:
    """Do ``facts`` answer every read of ``reads`` as recorded? (``sigs``: a cache of their
    answers, one per set of facts, shared with the traces of those facts; it keeps the
    answer for each ``reads`` object too: memo tables hold interned reads, asked about
    again and again.)"""
    key = id(reads)
    known = sigs.get(key)
    if known is not None and cast(tuple[Reads, bool], known)[0] is reads:
        return cast(tuple[Reads, bool], known)[1]
    # every question's answer so far, looked up and compared in C; those not asked yet
    # under these facts are answered first
    current = list(map(sigs.get, map(_ASKED, reads), repeat(_UNSEEN)))
    if _UNSEEN in current:
        for i, (asked, _) in enumerate(reads):
            if current[i] is _UNSEEN:
                current[i] = sigs[asked] = _answer(facts, asked)
    matched = all(map(eq, current, map(_ANSWER, reads)))
    sigs[key] = (reads, matched)  # ``reads`` kept: its id names no other object meanwhile
    return matched


_UNSEEN = object()
_ASKED, _ANSWER = itemgetter(0), itemgetter(1)


def answered_absent(reads: Reads, keys: Collection[str]) -> bool:
    """Did every question of ``reads`` about a fact of ``keys`` find it absent? (A key
    never asked about counts as absent; a read of the whole key set does not.)"""
    if not keys:
        return True
    asked = dict(reads)
    if _WHOLE in asked:
        return False
    for key in keys:
        if asked.get((_MEMBER, key)) is True:
            return False
        if any(asked.get((kind, key), _ABSENT) != _ABSENT for kind in (_VALUE, _FULL)):
            return False
    return True


def values_only(reads: Reads, shown: Collection[str] = ()) -> Reads:
    """``reads`` with each value read kept as the value alone, not where it came from
    (except the facts of ``shown``, those a result shows with their origin): so that facts
    equal in value but of another origin (another GPU profile of the same kind) answer
    alike."""
    out: list[tuple[object, object]] = []
    for asked, answer in reads:
        if isinstance(asked, tuple) and asked[0] == _FULL and asked[1] not in shown:
            asked = _question(_VALUE, asked[1])
            if isinstance(answer, tuple) and answer is not _ABSENT:
                answer = answer[0]
        out.append((asked, answer))
    return interned(_INTERNED, tuple(out))
