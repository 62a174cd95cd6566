"""Value classes for rule cards: when a card's verdict depends on a model path only through
tests that many paths answer alike, its record serves every path of the class.

Almost every derived card of 0.5.2x starts with SGLang's guard
``not args.model_path.lower() in ['none', 'dummy']``, and a log's model path is new to
the service nearly every time. Its exact value in a card's recorded reads
(:mod:`~service.engine.rules.attr_reads`) would make every never-seen path re-judge
every card that reads it. Here a card's record keeps the *class* of each path of
:data:`~service.engine.evaluate.path_classes.CLASSED` instead (how it was given included)
whenever every text the evaluation ran uses the paths by class
(:mod:`~service.engine.evaluate.path_classes`): ``when``, ``require`` (calls of the card
helpers count as computed) and the writes of the slices folded in for them.

A verdict served to another member of the class is :func:`rebased`: its inputs show the
new paths, and a verdict whose reason, notes or other inputs quote an old path is not served
at all.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import replace

from kb.rules.cards import helper_reads
from service.engine.evaluate.fold_slice import Slice
from service.engine.evaluate.path_classes import (
    CLASSED,
    Origin,
    moved_entry,
    moved_paths,
    uses_by_class,
)
from service.engine.expr.interpreter import Value
from service.engine.expr.trace import Reads, answered_absent
from service.engine.rules.card_env import CARD_FUNCTIONS
from service.engine.rules.card_verdict import CardResult

__all__ = ["card_classed", "folds_classed", "rebased"]

_HELPERS = frozenset({*CARD_FUNCTIONS, "given"})


@functools.lru_cache(maxsize=16384)
def card_classed(when: str, require: str) -> frozenset[str]:
    """The classed attributes a card's own conditions (and the helpers they call) allow
    to be read by class (all of them, or none)."""
    if CLASSED & helper_reads(when, require) or not uses_by_class(
        (when, require), computed=_HELPERS
    ):
        return frozenset()
    return CLASSED


def folds_classed(slices: Iterable[Slice], fact_reads: Reads) -> frozenset[str]:
    """The classed attributes the writes of the folded ``slices`` allow to be read by
    class (all of them, or none; writes outside the slices were not evaluated), given the
    evaluation's ``fact_reads``: a path assigned from a fact must have found none."""
    absent: set[str] = set()
    for piece in slices:
        ok, keys = piece.paths
        if not ok:
            return frozenset()
        absent |= keys
    return CLASSED if not absent or answered_absent(fact_reads, absent) else frozenset()


def rebased(result: CardResult, origin: Origin, attrs: Mapping[str, Value]) -> CardResult | None:
    """``result``, recorded with the classed values ``origin``, as the verdict for ``attrs``
    (which answer its reads alike): each input of a classed attribute shows the path of
    ``attrs`` that takes the old one's place. ``None`` when the reason, a note or another
    input quotes an old path."""
    moved = moved_paths(origin, attrs)
    if not moved:
        return result
    texts = (result.reason, *result.notes)
    if any(old in t for old in moved for t in texts):
        return None
    inputs: list[tuple[str, object, str]] = []
    for name, value, detail in result.inputs:
        entry = moved_entry(name, value, detail, moved)
        if entry is None:
            return None  # quotes an old path that does not take the new one's place
        inputs.append((name, *entry))
    return replace(result, inputs=inputs)
