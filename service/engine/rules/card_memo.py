"""Each rule card's verdict through the memo tables (:func:`judge_entries`).

A verdict is looked up, in order:

* in the per-card memo, keyed on the values (and provenance) of every dependency of the
  card, a model path by its class (:mod:`~service.engine.evaluate.path_classes`), and, per
  variant, on the facts it read: a verdict whose evaluation read the paths by class alone
  serves every path of the class, rebased to show it
  (:func:`~service.engine.rules.value_classes.rebased`), another only the paths it was
  judged with;
* among the records of other commands by the attributes their evaluations read
  (:mod:`~service.engine.rules.attr_reads`, kept by class or by tests' answers where the
  verdict allows: :mod:`~service.engine.rules.value_classes`);
* among a derived card's view records, by the folded values its conditions read
  (:mod:`~service.engine.rules.card_records`);

and is judged afresh (:func:`~service.engine.rules.card_records.judge_fresh`) when none
serves. Each comes with the attributes it rested on, for the checker's bases
(:mod:`~service.engine.rules.checker`). The cards judged for one command share the slice
folds made for it, and take over those of the last command judged under the same facts
that read none of the attributes that differ. The facts' answers and the guard memo of the
folds are shared by every evaluation under the same facts. Every table is bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import compress
from operator import is_not
from typing import Any

from kb.catalogs import load_catalog
from kb.store import Store
from service.engine.cache import LRUCache, cached, release_key
from service.engine.evaluate.fold_slice import Made, inherited
from service.engine.evaluate.path_classes import CLASSED, Origin, class_signature, origin_of
from service.engine.evaluate.path_condition import value_signature
from service.engine.expr.interpreter import Value
from service.engine.expr.trace import Reads, reads_match, shared_answers
from service.engine.flags.parse import ParsedArgs
from service.engine.rules.attr_reads import CLASS_MARK, attrs_match
from service.engine.rules.attr_reads import Reads as AttrReadsT
from service.engine.rules.card_env import CARD_FUNCTIONS
from service.engine.rules.card_records import (
    Judging,
    Record,
    ViewRecord,
    judge_fresh,
    view_served,
)
from service.engine.rules.card_verdict import CardResult, given_function
from service.engine.rules.release_cards import CardEntry
from service.engine.rules.value_classes import rebased

__all__ = ["Deps", "differing", "judge_entries"]

#: the attributes a verdict rests on, those read by the folds of earlier writes included
#: (``None``: not known; every dependency of the card then)
Deps = frozenset[str] | None
#: a verdict in the per-card memo: the facts it read, the verdict, the attributes it rests
#: on, the model paths it was judged with and whether it holds for every path of their
#: class (it is then rebased to the paths of the command it serves)
_Variant = tuple[Reads, CardResult, Deps, Origin, bool]
# (release, card, values of its dependencies, each model path of ``CLASSED`` by its class)
# -> its verdicts (:data:`_Variant`)
_memo: LRUCache[tuple[_Variant, ...]] = LRUCache("rules.card_verdicts", 100_000)
#: per card and dependency values, this many verdicts are kept (one per way facts answered)
_VARIANTS = 8
# (release, card, typed spellings if it asks) -> verdicts, each with the attributes and facts
# its evaluation read: a command that answers those reads alike gets the same verdict
_by_reads: LRUCache[tuple[Record, ...]] = LRUCache("rules.card_verdicts_by_reads", 20_000)
_READ_VARIANTS = 16
# the same key -> a derived card's verdicts, each with what its conditions read through the
# folded view: a command whose folds give those values gets the same verdict
_by_view: LRUCache[tuple[ViewRecord, ...]] = LRUCache("rules.card_verdicts_by_view", 20_000)

# facts signature -> what evaluations under them share
_shared: LRUCache[_Shared] = LRUCache("rules.under_facts", 64)
_SHARED_MAX = 100_000

# (release, facts) -> the attributes last judged under them, and the slice folds made for
# those: a command differing in a few attributes inherits the folds that read none of them
# (see fold_slice.inherited)
_last_folds: LRUCache[tuple[Mapping[str, Value], Made]] = LRUCache("rules.last_folds", 64)


def _choice_attrs(store: Store, release: str) -> frozenset[str]:
    """The release's attributes whose flag lists its choices (backends, dtypes, modes):
    those a card's record may keep by the answers to its tests
    (:func:`~service.engine.rules.value_classes.card_tests`)."""

    def build() -> frozenset[str]:
        catalog = load_catalog(store, release)
        return frozenset(spec.attr for spec in catalog.by_attr().values() if spec.choices)

    return cached(release_key(store, release, "rules:choice-attrs"), build)


class _Shared:
    """What every evaluation under one set of facts shares besides their answers
    (:func:`~service.engine.expr.trace.shared_answers`): the memo of the guards of folded
    writes (keyed on the values they read), emptied when large."""

    __slots__ = ("guard_memo",)

    def __init__(self) -> None:
        self.guard_memo: dict[tuple[Any, ...], object] = {}


def _under_facts(fsig: str) -> _Shared:
    shared = _shared.get_or_build(fsig, _Shared)
    if len(shared.guard_memo) > _SHARED_MAX:
        shared.guard_memo.clear()
    return shared


def judge_entries(
    store: Store,
    release: str,
    entries: list[CardEntry],
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    fsig: str,
    parsed: ParsedArgs,
) -> list[tuple[CardResult, Deps]]:
    """Each entry's verdict, through the per-card memo, with the attributes it rests on
    (``None``: not known, its dependencies then). ``fsig``: the facts' signature. The
    slice folds of the last attributes judged under these
    facts that read none of the attributes differing here are taken over."""
    given, typed = given_function(parsed)
    shared = _under_facts(fsig)
    fkey = (release_key(store, release, "rules:folds"), fsig)
    last = _last_folds.get(fkey)
    made = inherited(last[1], differing(attrs, last[0])) if last is not None else {}
    ctx = Judging(
        attrs,
        facts,
        {**CARD_FUNCTIONS, "given": given},
        _choice_attrs(store, release),
        shared_answers(fsig),
        made,
        shared.guard_memo,
    )
    sigs = _Signatures(attrs)  # the signatures of ``attrs`` read so far
    memo_sigs = _ClassSignatures(sigs)
    paths = origin_of(CLASSED, attrs)
    fact_sigs = ctx.fact_sigs
    rkey = release_key(store, release, "rules:verdict")
    out: list[tuple[CardResult, Deps]] = []
    for e in entries:
        card = e.card
        key = (
            rkey,
            card.id,
            card.when,
            card.require,
            tuple(map(memo_sigs.__getitem__, e.deps)),
            typed if e.uses_given else (),
        )
        # one entry per way the facts answered the card's reads of them (and per path of
        # the class, for a verdict that holds for these paths alone)
        variants = _memo.get(key) or ()
        hit = _memo_served(variants, paths, attrs, facts, fact_sigs)
        if hit is not None:
            out.append(hit)
            continue
        # another command's verdict, when these attributes and facts answer its reads alike
        rkey_card = (rkey, card.id, card.when, card.require, key[-1])
        seen = _by_reads.get(rkey_card) or ()
        for attr_reads, fact_reads, result, origin, shown, deps in seen:
            if attrs_match(attr_reads, attrs, sigs) and reads_match(fact_reads, facts, fact_sigs):
                served = rebased(result, origin, attrs, shown)
                if served is None:  # its reason quotes another value: judge afresh
                    continue
                classed = _by_class_alone(attr_reads)
                _memo.put(key, (*variants, (fact_reads, served, deps, paths, classed))[-_VARIANTS:])
                out.append((served, deps))
                break
        else:
            viewed = _by_view.get(rkey_card) or ()
            got = view_served(store, release, e, ctx, viewed) if viewed else None
            if got is not None:
                served, fact_reads, deps, classed = got
                _memo.put(key, (*variants, (fact_reads, served, deps, paths, classed))[-_VARIANTS:])
                out.append((served, deps))
                continue
            judged = judge_fresh(store, release, e, ctx)
            record = judged.record
            classed = record is not None and _by_class_alone(record[0])
            entry = (judged.fact_reads, judged.result, judged.deps, paths, classed)
            _memo.put(key, (*variants, entry)[-_VARIANTS:])
            if record is not None:
                _by_reads.put(rkey_card, (*seen, record)[-_READ_VARIANTS:])
            if judged.view is not None:
                _by_view.put(rkey_card, (*viewed, judged.view)[-_READ_VARIANTS:])
            out.append((judged.result, judged.deps))
    _last_folds.put(fkey, (dict(attrs), ctx.made))
    return out


def _by_class_alone(reads: AttrReadsT) -> bool:
    """Did an evaluation whose record holds ``reads`` read the model paths by class alone
    (or not at all)?"""
    return all(k.partition("#")[0] not in CLASSED or k.endswith(CLASS_MARK) for k, _ in reads)


def _memo_served(
    variants: tuple[_Variant, ...],
    paths: Origin,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    fact_sigs: dict[object, object],
) -> tuple[CardResult, Deps] | None:
    """The verdict of the first variant whose facts ``facts`` answer alike and that was
    judged with the model paths ``paths`` or holds for every path of their class, rebased
    to those of ``attrs`` (a variant whose texts quote an old path is passed over)."""
    for reads, result, deps, origin, classed in variants:
        if (origin == paths or classed) and reads_match(reads, facts, fact_sigs):
            served = result if origin == paths else rebased(result, origin, attrs)
            if served is not None:
                return served, deps
    return None


class _ClassSignatures(dict[str, object]):
    """The memo view of one command's attributes: each model path of ``CLASSED`` by its
    class (how it was given included), every other attribute by its signature."""

    __slots__ = ("sigs",)

    def __init__(self, sigs: _Signatures) -> None:
        super().__init__()
        self.sigs = sigs

    def __missing__(self, key: str) -> object:
        sig = self[key] = (
            class_signature(self.sigs.attrs, key) if key in CLASSED else self.sigs[key]
        )
        return sig


class _Signatures(dict[str, object]):
    """The signatures of one command's attributes, each computed on first lookup (for
    :func:`attrs_match` too, which fills it by ``get``)."""

    __slots__ = ("attrs",)

    def __init__(self, attrs: Mapping[str, Value]) -> None:
        super().__init__()
        self.attrs = attrs

    def __missing__(self, key: str) -> object:
        sig = self[key] = value_signature(self.attrs.get(key))
        return sig


def differing(attrs: Mapping[str, Value], other: Mapping[str, Value]) -> set[str]:
    """Attributes whose value or provenance differs between ``attrs`` and ``other`` (the
    same object is the same attribute: commands share most values with the defaults)."""
    if isinstance(attrs, dict) and isinstance(other, dict) and list(attrs) == list(other):
        # the usual case, both the release's attributes in one order: compared in C
        maybe: Iterable[str] = compress(attrs, map(is_not, attrs.values(), other.values()))
    else:
        maybe = [k for k in attrs.keys() | other.keys() if attrs.get(k) is not other.get(k)]
    return {k for k in maybe if value_signature(attrs.get(k)) != value_signature(other.get(k))}
