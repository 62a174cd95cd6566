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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kb.store import Store
from service.engine.evaluate.fold_slice import FoldedView, Made
from service.engine.evaluate.path_classes import Origin, origin_of
from service.engine.expr.interpreter import Env, Value, evaluate
from service.engine.expr.trace import FactsTrace, Reads, values_only
from service.engine.rules.attr_reads import AttrReads
from service.engine.rules.attr_reads import Reads as AttrReadsT
from service.engine.rules.card_verdict import CardResult, judge_card, when_operands
from service.engine.rules.release_cards import CardEntry
from service.engine.rules.value_classes import (
    Shown,
    card_classed,
    card_tests,
    folds_classed,
    shown_of,
)

__all__ = ["Judging", "Record", "judge_fresh", "narrowed"]

#: what a verdict rests on: (attributes read, facts read, the verdict, the classed values it
#: was judged with, the tested values it was judged with)
Record = tuple[AttrReadsT, Reads, CardResult, Origin, Shown]


class Judging:
    """What judging one command's cards shares: its attributes and facts, the facts'
    answers so far, the functions conditions may call, the guard memo and the slice folds
    made, and the release's attributes with choices (kept by their tests' answers)."""

    __slots__ = ("attrs", "choices", "fact_sigs", "facts", "functions", "guard_memo", "made")

    def __init__(
        self,
        attrs: Mapping[str, Value],
        facts: Mapping[str, Value],
        functions: Mapping[str, Callable[..., object]],
        choices: frozenset[str],
    ) -> None:
        self.attrs = attrs
        self.facts = facts
        self.functions = functions
        self.choices = choices
        self.fact_sigs: dict[object, object] = {}
        self.guard_memo: dict[tuple[Any, ...], object] = {}
        self.made: Made = {}


def judge_fresh(
    store: Store, release: str, entry: CardEntry, ctx: Judging
) -> tuple[CardResult, Reads, Record | None]:
    """``entry``'s card judged under ``ctx``: (its verdict, the facts the judging read, the
    record that serves the verdict to commands answering its reads alike, ``None`` when
    the evaluation read every attribute)."""
    card = entry.card
    trace, read, folded, env = _views(store, release, entry, ctx)
    result = judge_card(card, env, folded.caveats if folded is not None else [])
    fact_reads = trace.snapshot()
    texts = (card.when, card.require)
    operand = narrowed(result)
    if operand is not None:  # the record rests on the false operand alone
        trace, read, folded, env = _views(store, release, entry, ctx)
        if evaluate(operand, env).truth is not False:  # pragma: no cover - it is pure
            return result, fact_reads, None
        texts = (operand, "True")
    if read.whole:
        return result, fact_reads, None
    reads = trace.snapshot()
    # a model path read only by its class serves every path of the class, a value read
    # only through tests every value answering them alike
    classed = card_classed(*texts)
    slices = folded.slices if folded is not None else []
    if classed and slices:
        classed &= folds_classed(slices, reads)
    origin = origin_of(read.reads, ctx.attrs) if classed else ()
    tested = card_tests(*texts, slices, read.reads, classed, ctx.choices)
    shown = shown_of(tested, ctx.attrs) if tested else ()
    # how a value was given, and where a fact came from, matter only for those the verdict
    # shows (its inputs): the others are kept by value, so another GPU of the same kind
    # answers alike
    inputs = {name for name, _, _ in result.inputs}
    snapshot = read.snapshot(classed, tested, shown=inputs)
    return result, fact_reads, (snapshot, values_only(reads, inputs), result, origin, shown)


def narrowed(result: CardResult) -> str | None:
    """The false ``when`` operand a ``not_applicable`` verdict's record rests on, when
    operands ran before it (else the evaluation read that operand alone already)."""
    if result.verdict != "not_applicable" or not result.operand:
        return None
    return result.operand if result.operand != when_operands(result.card.when)[0] else None


def _views(
    store: Store, release: str, entry: CardEntry, ctx: Judging
) -> tuple[FactsTrace, AttrReads, FoldedView | None, Env]:
    """Fresh views of ``ctx``'s facts and attributes recording what is read (the earlier
    writes folded in for a derived card), and the environment over them."""
    trace = FactsTrace(ctx.facts, ctx.fact_sigs)
    read = AttrReads(ctx.attrs)
    view: Mapping[str, Value] = read
    folded: FoldedView | None = None
    if entry.row is not None:
        # the earlier writes of each attribute the card reads, folded in on first read
        view = folded = FoldedView(
            store, release, entry.row, entry.card.reads, read, trace, ctx.guard_memo, ctx.made
        )
    return trace, read, folded, Env(view, trace, ctx.functions)
