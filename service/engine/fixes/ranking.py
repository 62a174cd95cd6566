"""Ranking candidate fixes: verified first, then by how much of the user's request they keep.

The order (:func:`rank`), best first:

1. status: verified clean, then fixing the check but tripping another, then undecided;
   without the command, a fix that holds whatever the unseen flags were, then one leaving
   fewer related checks undecided;
2. intent (:func:`~service.engine.fixes.intent.intent_cost`): fewer feature flags switched
   off, then fewer given up (``--speculative-algorithm``, ``--enable-lora``: another
   algorithm keeps speculative decoding, dropping the flag does not); then a fix of the
   check before a flip of an early exit that only skips it
   (:func:`~service.engine.fixes.filters.guard_flip`),
   then fewer of the user's explicit values overridden, so that adding a missing companion flag or changing a setting the
   user did not set comes before changing or dropping one they did;
3. :func:`intent_tier`: what the failing test reads before outer guards and call sites;
4. fewer trips, a smaller edit, removals before additions, SGLang's own agreeing choice
   (:attr:`~service.engine.fixes.model.Edit.preference`), fewer undecided neighbours, a
   value the check's message spells, a value the release lists earlier among the flag's
   choices, a number nearer the launch's own.

:func:`diverse` then keeps at most two value variants of one edit shape ahead of other
kinds of fix within each status.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.fixes.intent import IntentCost
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.resets import ORIGIN as RESET_ORIGIN

__all__ = ["Cost", "diverse", "intent_tier", "rank"]


def intent_tier(edit: Edit, ev: PathEvaluation) -> int:
    """How much of the user's intent an edit gives up (lower keeps more).

    0: touches only what the failing test reads, or keeps SGLang from resetting a value
    the user gave it (:mod:`~service.engine.fixes.resets`); 1: SGLang's own choice;
    2: the innermost guard; 3: outer guards and call sites, which usually
    switch the whole feature off (dropping ``--speculative-algorithm``, say).
    """
    if edit.origin.startswith(RESET_ORIGIN):  # the user's own value then reaches the test
        return 0
    if edit.origin.startswith("set explicitly what SGLang"):
        return 1
    touched = set(edit.set) | set(edit.remove)
    test_names: set[str] = set()
    inner_names: set[str] = set()
    guards = [p for p in ev.parts if p.role == "guard"]
    for part in ev.parts:
        names = {n for a in part.result.atoms for n, _, _ in a.inputs}
        if part.role == "test":
            test_names |= names
        elif guards and part is guards[-1]:
            inner_names |= names
    if ev.parts and ev.parts[-1].role != "test":  # a raise: its innermost guard is its test
        test_names |= inner_names
    if touched <= test_names:
        return 0
    if touched <= test_names | inner_names:
        return 2
    return 3


Cost = dict[tuple[Any, ...], IntentCost]


def rank(
    verdicts: list[Verdict],
    ev: PathEvaluation | None = None,
    costs: Cost | None = None,
    *,
    skips_first: bool = False,
    named: frozenset[str] = frozenset(),
    robust: frozenset[tuple[Any, ...]] | None = None,
    message: str = "",
    choices: Mapping[str, Sequence[object]] | None = None,
    current: Mapping[str, object] | None = None,
) -> list[Verdict]:
    """Best first: verified clean, then fixing the check but tripping another, then the rest
    (undecided); within each, what keeps more of the user's request (``costs``: the
    :class:`~service.engine.fixes.intent.IntentCost` of each edit by key: fewer features
    switched off, fewer given up, a fix before a guard flip, fewer of the user's values
    overridden), then :func:`intent_tier`, fewer
    trips, a smaller edit, removals before additions, SGLang's own agreeing choice
    (:attr:`Edit.preference`), fewer undecided neighbours.

    ``skips_first``: a fix of the check comes before a guard flip whatever features they
    give up, for flags implied by the check rather than read from the user's command
    (:mod:`service.engine.fixes.implied`), which say nothing of what the user asked for.

    ``named``: the attributes of the flags the check's message spells out; among fixes of
    one tier, one that edits such a flag comes first (without the command, the message is
    the one word on which flag the user set: ``--linear-attn-prefill-backend flashinfer``
    is fixed on that flag whether or not the user also set ``--linear-attn-backend``).

    ``robust`` (without the command): the keys of the fixes that hold whatever the flags the
    log does not show were; within a status they come first, before what the others keep,
    and then those leaving fewer related checks undecided (on a launch only assumed, an
    undecided neighbour may well fire: dropping ``--pp-size`` for "PP is not supported with
    context parallelism" leaves open whether ``--moe-dp-size`` then trips the next
    assert; dropping ``--moe-dp-size`` decides both).

    The last ties: ``message`` (the check's message source) puts a value it spells first,
    in its order ("Only EAGLE and DSPARK ... are supported": ``EAGLE``, then ``DSPARK``);
    then ``choices`` (attribute -> its flag's choices) a value the release lists earlier
    (``deepep`` before ``ascend_fuseep``); then a number nearer the value the launch had
    (``current``, attribute -> value: ``--pp-size 2`` before ``16`` from 1); the edits'
    keys settle the rest."""
    zero = IntentCost(0, 0, 0)

    def key(v: Verdict) -> tuple[Any, ...]:
        status = 0 if v.ok else (1 if v.fixes_check is True else 2)
        cost = (costs or {}).get(v.edit.key(), zero)
        tier = intent_tier(v.edit, ev) if ev is not None else 0
        order = (
            (bool(v.edit.skips), cost.off, cost.features)
            if skips_first
            else (cost.off, cost.features, bool(v.edit.skips))
        )
        return (
            status,
            robust is not None and v.edit.key() not in robust,
            v.unknown_neighbours if robust is not None else 0,
            *order,
            cost.overridden,
            tier,
            not (named & (set(v.edit.set) | set(v.edit.remove))),
            len(v.trips),
            v.edit.size(),
            -len(v.edit.remove),
            v.edit.preference,
            v.unknown_neighbours,
            _spelled_at(v.edit, message),
            _listed_at(v.edit, choices or {}),
            _moved_by(v.edit, current or {}),
            v.edit.key(),
        )

    return sorted(verdicts, key=key)


def _listed_at(edit: Edit, choices: Mapping[str, Sequence[object]]) -> int:
    """Where the first value ``edit`` sets stands among its flag's listed choices (their
    number when it is none of them, or the flag lists none)."""
    for attr, value in edit.set.items():
        listed = choices.get(attr)
        if listed:
            return list(listed).index(value) if value in listed else len(listed)
    return 0


def _moved_by(edit: Edit, current: Mapping[str, object]) -> float:
    """How far the numbers ``edit`` sets move from the numbers the launch had (one whose
    value is not known, or not a number, does not count: nearer to nothing known is no
    better)."""
    total = 0.0
    for attr, value in edit.set.items():
        new, was = _number(value), _number(current.get(attr))
        if new is not None and was is not None:
            total += abs(new - was)
    return total


def _number(value: object) -> float | None:
    """``value`` as a number (None for a switch, text or anything else)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _spelled_at(edit: Edit, message: str) -> int:
    """Where ``message`` first spells a text value ``edit`` sets, as a whole word (its
    length when it spells none)."""
    found = [
        m.start()
        for v in edit.set.values()
        if isinstance(v, str) and v and message
        for m in [re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", message)]
        if m is not None
    ]
    return min(found, default=len(message))


def diverse(ranked: list[Verdict], costs: Cost | None = None, per_shape: int = 2) -> list[Verdict]:
    """``ranked`` with, within each status (clean, tripping, other), at most ``per_shape``
    candidates of one shape (the same attributes set and removed, differing only in the
    values) ahead of the other shapes: five backends for one flag are one kind of fix, and
    the list should show the other kinds too. The first of each shape keeps its place, so
    the best fix keeping the request still comes before any giving part of it up.
    (``costs`` is accepted for symmetry with :func:`rank`; the order already holds it.)"""
    del costs
    groups: dict[int, tuple[list[Verdict], list[Verdict]]] = {}
    seen: dict[tuple[int, frozenset[str], frozenset[str]], int] = {}
    for v in ranked:
        status = 0 if v.ok else (1 if v.fixes_check is True else 2)
        shape = (status, frozenset(v.edit.set), frozenset(v.edit.remove))
        head, tail = groups.setdefault(status, ([], []))
        (head if seen.get(shape, 0) < per_shape else tail).append(v)
        seen[shape] = seen.get(shape, 0) + 1
    return [v for status in sorted(groups) for part in groups[status] for v in part]
