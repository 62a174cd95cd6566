"""One card judged afresh, and the record that lets its verdict serve other commands.

The checker (:mod:`service.engine.rules.checker`) keeps, per card, records of the
attributes and facts each evaluation read (:mod:`~service.engine.rules.attr_reads`): a
command answering those reads alike gets the recorded verdict. :func:`judge_fresh` judges
a card under one command's attributes and facts and builds that record.

A ``not_applicable`` verdict rests on its false ``when`` operand alone
(:func:`~service.engine.rules.card_verdict.judge_card`). When operands ran before it (they
were true or unknown), they read attributes the verdict does not depend on: a fix
candidate changing one of them (a backend, a dtype) would miss the record and judge the
card again, although the same operand is false for it too. So the false operand is
evaluated once more on its own (the slice folds of the first evaluation are reused), and
the record keeps only what that evaluation read.

How a value was given (a flag, its spelling, a default) and where a fact came from (which
GPU profile) matter only for the inputs a verdict shows: evaluations read values. So a
record keeps every other attribute and fact it read by value alone, and a fact of equal
value from another GPU of the same kind answers alike.

A derived card's record is kept twice. The record above names the attributes as given,
which the folds of the earlier writes read too: a fix candidate changing a flag that some
folded write tests (``kv_cache_dtype`` against each of its literals) misses it, although
the folded values the card's conditions read are mostly the same. The *view record*
(:data:`ViewRecord`, :func:`view_served`) names what the conditions read through the
folded view instead: each value with its provenance and the caveats its fold gave (for a
verdict that does not apply, the answers to the tests its operand makes, or the value
alone), and the facts the conditions read (the folded values stand for those the folds
read). A command whose folds (shared by the cards judged for it) give those values and
caveats, under facts answering alike, gets the same verdict without evaluating the card:
the evaluation is deterministic in what it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from kb.store import Store
from service.engine.evaluate.fold import fold_plan
from service.engine.evaluate.fold_slice import (
    FoldedView,
    Made,
    Seen,
    ViewReads,
    seen_through,
    view_answer,
)
from service.engine.evaluate.literal_classes import Tests
from service.engine.evaluate.path_classes import Origin, origin_of
from service.engine.evaluate.slice_plan import Plan
from service.engine.expr.interpreter import Env, Value, evaluate
from service.engine.expr.trace import FactsTrace, Reads, reads_match, values_only
from service.engine.rules.attr_reads import AttrReads
from service.engine.rules.attr_reads import Reads as AttrReadsT
from service.engine.rules.card_verdict import CardResult, judge_card, when_operands
from service.engine.rules.release_cards import CardEntry
from service.engine.rules.value_classes import (
    Shown,
    card_classed,
    card_tests,
    folds_classed,
    rebased,
    shown_of,
    view_tests,
)

__all__ = [
    "Judged",
    "Judging",
    "Record",
    "ViewRecord",
    "judge_fresh",
    "narrowed",
    "shown_tests",
    "view_served",
]

#: what a verdict rests on: (attributes read, facts read, the verdict, the classed values it
#: was judged with, the tested values it was judged with, the attributes read by name)
Record = tuple[AttrReadsT, Reads, CardResult, Origin, Shown, frozenset[str]]
#: what a derived card's verdict rests on as its conditions saw it: (each attribute read
#: through the folded view with its answer, :meth:`FoldedView.reads_of`; the facts the
#: conditions read; the verdict; for a verdict that shows values, those of the attributes
#: kept by their tests' answers, else ``None``)
ViewRecord = tuple[ViewReads, Reads, CardResult, Shown | None]


class Judging:
    """What judging one command's cards shares: its attributes and facts, the facts'
    answers so far (``fact_sigs``, which evaluations under equal facts may share), the
    functions conditions may call, the guard memo and the slice folds made, and the
    release's attributes with choices (kept by their tests' answers). The guard memo is
    keyed on the values read, so commands under equal facts may share it; ``made`` may
    start with the folds of another command that fold alike here
    (:func:`~service.engine.evaluate.fold_slice.inherited`)."""

    __slots__ = (
        "attrs",
        "choices",
        "fact_sigs",
        "facts",
        "functions",
        "guard_memo",
        "made",
        "plans",
        "seen",
    )

    def __init__(
        self,
        attrs: Mapping[str, Value],
        facts: Mapping[str, Value],
        functions: Mapping[str, Callable[..., object]],
        choices: frozenset[str],
        fact_sigs: dict[object, object] | None = None,
        made: Made | None = None,
        guard_memo: dict[tuple[Any, ...], object] | None = None,
    ) -> None:
        self.attrs = attrs
        self.facts = facts
        self.functions = functions
        self.choices = choices
        self.fact_sigs: dict[object, object] = {} if fact_sigs is None else fact_sigs
        self.guard_memo: dict[tuple[Any, ...], object] = {} if guard_memo is None else guard_memo
        self.made: Made = {} if made is None else made
        #: (check id, the card's names) -> the fold plan, and the questions it asked the facts
        self.plans: dict[tuple[int, frozenset[str]], tuple[Plan, Reads]] = {}
        #: id of a plan -> attribute -> the attribute as that plan's folded view sees it
        self.seen: dict[int, dict[str, Seen]] = {}


class Judged(NamedTuple):
    """A card judged afresh (:func:`judge_fresh`)."""

    result: CardResult
    #: the facts the judging read
    fact_reads: Reads
    #: serves the verdict to commands answering its reads alike (``None``: the evaluation
    #: read every attribute)
    record: Record | None
    #: the view record of a derived card
    view: ViewRecord | None
    #: the attributes the verdict rests on, those the folds read included (``None``: all)
    deps: frozenset[str] | None


def judge_fresh(store: Store, release: str, entry: CardEntry, ctx: Judging) -> Judged:
    """``entry``'s card judged under ``ctx``, with the records that serve its verdict to
    other commands."""
    card = entry.card
    trace, cond, read, folded, env = _views(store, release, entry, ctx)
    result = judge_card(card, env, folded.caveats if folded is not None else [])
    fact_reads = _all_reads(trace, cond)
    texts = (card.when, card.require)
    operand = narrowed(result)
    if operand is not None:  # the record rests on the false operand alone
        trace, cond, read, folded, env = _views(store, release, entry, ctx)
        if evaluate(operand, env).truth is not False:  # pragma: no cover - it is pure
            return Judged(result, fact_reads, None, None, None)
        texts = (operand, "True")
    if read.whole:
        return Judged(result, fact_reads, None, None, None)
    deps = frozenset(read.reads)
    reads = _all_reads(trace, cond)
    # how a value was given, and where a fact came from, matter only for those the verdict
    # shows (its inputs): the others are kept by value, so another GPU of the same kind
    # answers alike
    inputs = {name for name, _, _ in result.inputs}
    seen: ViewRecord | None = None
    if folded is not None and not folded.whole:
        # a verdict that does not apply shows no value: what its operand tests suffices;
        # another keeps the attributes with choices that its conditions test by the tests'
        # answers (and caveats), and its inputs show the values of the command it serves;
        # the folded values stand for the facts the folds read
        facts_read = values_only(cond.snapshot(), inputs)
        if result.verdict == "not_applicable":
            seen = (folded.reads_of(view_tests(*texts)), facts_read, result, None)
        else:
            tests = shown_tests(*texts, ctx.choices)
            values = tuple((k, folded.seen[k]) for k in tests if k in folded.seen)
            seen = (folded.reads_of(tests, noted=True), facts_read, result, values)
    # a model path read only by its class serves every path of the class, a value read
    # only through tests every value answering them alike
    classed = card_classed(*texts)
    slices = folded.slices if folded is not None else []
    if classed and slices:
        classed &= folds_classed(slices, reads)
    origin = origin_of(read.reads, ctx.attrs) if classed else ()
    tested = card_tests(*texts, slices, read.reads, classed, ctx.choices)
    shown = shown_of(tested, ctx.attrs) if tested else ()
    snapshot = read.snapshot(classed, tested, shown=inputs)
    record = (snapshot, values_only(reads, inputs), result, origin, shown, deps)
    return Judged(result, fact_reads, record, seen, deps)


def view_served(
    store: Store, release: str, entry: CardEntry, ctx: Judging, records: tuple[ViewRecord, ...]
) -> tuple[CardResult, Reads, frozenset[str], bool] | None:
    """The verdict of the first of ``records`` (view records of ``entry``'s card) whose
    reads ``ctx``'s folded view and facts answer alike, with the facts that answer rests on
    (those the folds of its reads asked and the record's), the attributes (those read
    and those their slices read) and whether it holds for every model path of the class of
    ``ctx``'s (the card's conditions and the writes of those slices read the paths by class,
    :mod:`~service.engine.rules.value_classes`); ``None`` when none does.

    Each attribute is seen through its own slice (:func:`seen_through`), once per command
    and check (``ctx.seen``); the slices are folded once per command (``ctx.made``), and
    nothing else is evaluated."""
    row = entry.row
    if row is None:
        return None
    names = entry.card.reads
    planned = ctx.plans.get((row.id, names))
    if planned is None:  # the plan's questions about which facts exist are recorded
        asked = FactsTrace(ctx.facts, ctx.fact_sigs)
        plan = fold_plan(store, release, row, frozenset(names), asked.names())[0]
        planned = ctx.plans[(row.id, names)] = (plan, asked.snapshot())
    plan = planned[0]
    seen = ctx.seen.setdefault(id(plan), {})
    for reads, fact_reads, result, values in reversed(records):
        noted = values is not None
        for k, how, answer in reads:
            got = seen.get(k)
            if got is None:
                trace = FactsTrace(ctx.facts, ctx.fact_sigs)
                got = seen_through(
                    store,
                    release,
                    row,
                    names,
                    plan,
                    k,
                    ctx.attrs,
                    trace,
                    ctx.guard_memo,
                    ctx.made,
                    seen,
                )
                seen[k] = got
            if view_answer(got[0], got[1], how, noted) != answer:
                break
        else:
            if not reads_match(fact_reads, ctx.facts, ctx.fact_sigs):
                continue
            if values:  # its inputs show the values this command's view gives
                now = {k: v for k, _ in values if (v := seen[k][0]) is not None}
                served = rebased(result, (), now, values)
                if served is None:  # its reason quotes a value that moved
                    continue
                result = served
            trace = FactsTrace(ctx.facts, ctx.fact_sigs)
            trace.replay(planned[1])
            deps: set[str] = set()
            slices = []
            for k, _, _ in reads:
                _, _, piece, folded = seen[k]
                deps.add(k)
                if piece is not None:
                    deps.update(piece.reads)
                    slices.append(piece)
                    trace.replay(folded)
            trace.replay(fact_reads)
            answered = trace.snapshot()
            classed = bool(
                card_classed(entry.card.when, entry.card.require)
                and folds_classed(slices, answered)
            )
            return result, answered, frozenset(deps), classed
    return None


def shown_tests(when: str, require: str, choices: frozenset[str]) -> dict[str, Tests]:
    """The attributes with choices (``choices``) that the view record of a verdict showing
    values keeps by the answers to the tests its conditions make (:func:`view_tests`); its
    inputs are shown anew for the command it serves (:func:`view_served`)."""
    return {k: t for k, t in view_tests(when, require).items() if t and k in choices}


def narrowed(result: CardResult) -> str | None:
    """The false ``when`` operand a ``not_applicable`` verdict's record rests on, when
    operands ran before it (else the evaluation read that operand alone already)."""
    if result.verdict != "not_applicable" or not result.operand:
        return None
    return result.operand if result.operand != when_operands(result.card.when)[0] else None


def _views(
    store: Store, release: str, entry: CardEntry, ctx: Judging
) -> tuple[FactsTrace, FactsTrace, AttrReads, FoldedView | None, Env]:
    """Fresh views of ``ctx``'s facts and attributes recording what is read (the earlier
    writes folded in for a derived card), and the environment over them: (the facts as
    the folds read them, the facts as the conditions read them (the same trace for a
    curated card), the attributes, the folded view, the environment)."""
    trace = FactsTrace(ctx.facts, ctx.fact_sigs)
    read = AttrReads(ctx.attrs)
    if entry.row is None:
        return trace, trace, read, None, Env(read, trace, ctx.functions)
    # the earlier writes of each attribute the card reads, folded in on first read
    folded = FoldedView(
        store, release, entry.row, entry.card.reads, read, trace, ctx.guard_memo, ctx.made
    )
    cond = FactsTrace(ctx.facts, ctx.fact_sigs)
    return trace, cond, read, folded, Env(folded, cond, ctx.functions)


def _all_reads(trace: FactsTrace, cond: FactsTrace) -> Reads:
    """Every fact question of one evaluation: the folds' and the conditions'."""
    if cond is not trace:
        trace.replay(cond.snapshot())
    return trace.snapshot()
