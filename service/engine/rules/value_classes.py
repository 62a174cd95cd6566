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

The other attributes a card read are kept the same way, as the answers to the tests made
on them (:mod:`~service.engine.evaluate.literal_classes`), when every text the evaluation
ran reads them only through tests against literals (:func:`card_tests`): a backend or dtype
value no command used before then finds the verdict of one that answers those tests alike.
A verdict served so shows the new value (and how it was given) among its inputs; one whose
reason quotes the old value (a violated card's reason does) is judged afresh.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import replace

from kb.rules.cards import helper_reads
from service.engine.evaluate.literal_classes import Tests, read_by_tests, uses_of
from service.engine.evaluate.memo_keys import value_signature
from service.engine.evaluate.path_classes import (
    CLASSED,
    Origin,
    moved_entry,
    moved_paths,
    uses_by_class,
)
from service.engine.evaluate.resolution import revalued_provenance
from service.engine.evaluate.slice_plan import Slice
from service.engine.expr.interpreter import Provenance, Value
from service.engine.expr.trace import Reads, answered_absent
from service.engine.rules.card_env import CARD_FUNCTIONS
from service.engine.rules.card_verdict import CardResult, shown_detail

__all__ = [
    "Shown",
    "card_classed",
    "card_tests",
    "folds_classed",
    "rebased",
    "shown_of",
    "view_tests",
]

#: the values (as given) of the attributes a record keeps by their tests' answers
Shown = tuple[tuple[str, Value | None], ...]

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


@functools.lru_cache(maxsize=16384)
def _card_uses(when: str, require: str) -> tuple[Mapping[str, Tests | None], frozenset[str]]:
    """How the card's conditions read each attribute, and the attributes never read by
    tests: the model paths and those the card helpers read."""
    return uses_of(((when, None), (require, None))), CLASSED | helper_reads(when, require)


def card_tests(
    when: str,
    require: str,
    slices: Iterable[Slice],
    reads: Iterable[str],
    classed: frozenset[str],
    among: frozenset[str],
) -> dict[str, Tests]:
    """Of the attributes ``reads`` that are in ``among``, those the card's conditions and
    the writes of the folded ``slices`` read only through tests against literals, with
    those tests (model paths kept by class are left out, and so are attributes the card
    helpers read)."""
    uses, skip = _card_uses(when, require)
    names = [n for n in reads if n in among and n not in skip and n not in classed]
    if not names:
        return {}
    return read_by_tests((uses, *(piece.uses for piece in slices)), names)


@functools.lru_cache(maxsize=16384)
def view_tests(when: str, require: str) -> Mapping[str, Tests | None]:
    """How a card's own conditions read each attribute they name: through these tests
    against literals, or otherwise (``None``; so are the model paths and what the card
    helpers read). For a view record (:mod:`~service.engine.rules.card_records`): the
    folded values are read by these texts alone."""
    uses, skip = _card_uses(when, require)
    return {name: None if name in skip else tests for name, tests in uses.items()}


def shown_of(tested: Mapping[str, Tests], attrs: Mapping[str, Value]) -> Shown:
    """The values of the ``tested`` attributes in ``attrs`` (for :func:`rebased`)."""
    return tuple((name, attrs.get(name)) for name in tested)


def _moved(value: object, detail: str, old: Value, new: Value) -> tuple[object, str] | None:
    """An input ``(value, detail)`` of a tested attribute whose value moved from ``old`` to
    ``new``, as it shows for ``new``: the value as given shows the new one; so does a write
    of it back to itself (``write: set to 'bf16' at …``), with its detail rewritten; another
    value (a literal folded in) is the same for both. ``None``: cannot tell."""
    if type(value) is not type(old.value) or value != old.value:
        return value, detail
    if detail == shown_detail(old.provenance):
        return new.value, shown_detail(new.provenance)
    kind, _, written = detail.partition(": ")
    revalued = revalued_provenance(written, old.value, new.value) if kind == "write" else None
    if revalued is None:
        return None
    return new.value, shown_detail(Provenance("write", revalued))


def rebased(
    result: CardResult, origin: Origin, attrs: Mapping[str, Value], shown: Shown = ()
) -> CardResult | None:
    """``result``, recorded with the classed values ``origin`` and the tested values
    ``shown``, as the verdict for ``attrs`` (which answer its reads alike): each input of a
    classed attribute shows the path of ``attrs`` that takes the old one's place, and each
    input showing a tested attribute as it was given shows it as ``attrs`` give it.
    ``None`` when the reason, a note or another input quotes an old path, or the reason
    quotes a tested attribute that moved."""
    moved = moved_paths(origin, attrs)
    changed: dict[str, tuple[Value, Value]] = {}
    for name, old in shown:
        new = attrs.get(name)
        if old is not None and new is not None and value_signature(old) != value_signature(new):
            changed[name] = (old, new)
    if not moved and not changed:
        return result
    texts = (result.reason, *result.notes)
    if any(old in t for old in moved for t in texts):
        return None
    if any(f"{name}=" in result.reason for name in changed):
        return None  # a violated card's reason quotes the values: judged afresh
    inputs: list[tuple[str, object, str]] = []
    same = True
    for name, value, detail in result.inputs:
        entry = moved_entry(name, value, detail, moved) if moved else (value, detail)
        if entry is None:
            return None  # quotes an old path that does not take the new one's place
        pair = changed.get(name)
        if pair is not None:
            entry = _moved(entry[0], entry[1], pair[0], pair[1])
            if entry is None:
                return None
        same = same and entry[0] is value and entry[1] == detail
        inputs.append((name, *entry))
    return result if same else replace(result, inputs=inputs)
