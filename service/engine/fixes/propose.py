"""Candidate flag fixes: minimal edits that make the failing path condition false.

The candidates come from the condition itself (:mod:`service.engine.fixes.edits`), never
from a list of known answers. Each candidate is re-evaluated: the check must become
definitely false (:func:`fixes_check`). Then it is re-checked against the other checks of
the release that read an edited attribute (:mod:`service.engine.fixes.neighbours`: the rest
of the function, its neighbours in the validation files); a candidate that makes another
check fire is demoted and says which. Ranking: verified-clean first, then fewer edits,
removals before additions.
"""

from __future__ import annotations

import functools
from typing import Any

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.evaluate.chain import earlier_writes
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.fold import write_fails
from service.engine.evaluate.path_condition import PathEvaluation, evaluate_path, unseen_defaults
from service.engine.evaluate.pieces import PiecePart
from service.engine.expr.interpreter import UNKNOWN, Value
from service.engine.fixes.edits import candidate_edits, edited_attrs
from service.engine.fixes.filters import (
    guard_flip,
    message_attrs,
    refused_values,
    screened,
    sets_refused,
    sibling_trips,
    turns_off,
)
from service.engine.fixes.implied import assumed_launch, command_unknown
from service.engine.fixes.intent import intent_cost
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.neighbours import recheck_neighbours
from service.engine.fixes.ranking import Cost, diverse, rank

__all__ = ["RECHECK_SPARE", "Edit", "Verdict", "fixes_check", "propose", "still_fires", "verify"]

#: candidates re-checked beyond the number returned
RECHECK_SPARE = 5


def fixes_check(
    store: Store,
    version: str,
    check: Check,
    edit: Edit,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    catalog: Catalog,
    memo: dict[tuple[Any, ...], object] | None = None,
    *,
    facts_sig: str | None = None,
) -> Verdict:
    """Phase 1: does ``edit`` make the check itself definitely pass?"""
    new_attrs = edited_attrs(attrs, edit, catalog)
    ev = evaluate_path(store, version, check, new_attrs, facts, memo=memo, facts_sig=facts_sig)
    return Verdict(edit, ev.fired is False if ev.fired is not UNKNOWN else UNKNOWN, evaluation=ev)


def still_fires(crash: PathEvaluation, after: PathEvaluation) -> bool:
    """Does the check certainly fire again after an edit that left ``after`` undecided?

    The check fired at the crash (``crash``: its evaluation for the launch), so every piece
    of its path held then, known or not. A piece that reads the same values after the edit
    holds still; the pieces whose values the edit changed are taken as evaluated after it.
    When each of those holds too, the edit cannot be a fix: ``--pp-size 2`` for "only
    supports pp_size == 1" with the platform's support unknown is no candidate for replay.
    """
    if len(crash.parts) != len(after.parts):
        return False
    for before, now in zip(crash.parts, after.parts, strict=True):
        if before.condition != now.condition:
            return False
        if _inputs(before) != _inputs(now) and now.holds is not True:
            return False
    return True


def _inputs(part: PiecePart) -> list[tuple[str, object]]:
    """The values a piece's evaluation read, in order."""
    return [(name, value) for atom in part.result.atoms for name, value, _ in atom.inputs]


def verify(
    store: Store,
    version: str,
    check: Check,
    edit: Edit,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    catalog: Catalog,
) -> Verdict:
    """Both phases: the check passes, and no neighbouring check fires instead."""
    verdict = fixes_check(store, version, check, edit, attrs, facts, catalog)
    if verdict.fixes_check is True:
        recheck_neighbours(store, version, check, verdict, attrs, facts, catalog)
    return verdict


def _best_giving_up(ranked: list[Verdict], checked: list[Verdict], costs: Cost) -> Verdict | None:
    """The best-ranked candidate giving up a feature, when none of ``checked`` does."""
    if any(costs[v.edit.key()].features for v in checked):
        return None
    return next((v for v in ranked if costs[v.edit.key()].features and v not in checked), None)


def _robust(
    store: Store,
    version: str,
    check: Check,
    passing: list[Verdict],
    attrs: dict[str, Value],
    facts: dict[str, Value],
    catalog: Catalog,
    fsig: str | None,
) -> frozenset[tuple[Any, ...]]:
    """Keys of the fixes in ``passing`` that still make the check pass when every flag the
    log does not show is unknown instead of at its default: without the command, a fix that
    holds only if the user left the check's other flags alone is a guess about them
    (``--disable-overlap-schedule`` for "Pipeline parallelism is not compatible with overlap
    schedule, speculative decoding, mixed chunked prefill" holds only without speculative
    decoding; ``--pp-size 1`` holds whatever else was set). Dropping a flag that an earlier
    step of SGLang may set itself to the value the crash needs is no such fix: the user may
    never have passed it (``--disable-radix-cache``, which SGLang sets for a
    decode server, among others), unless that step cannot run under the facts (its guard
    asks for an AMD GPU, and this one is NVIDIA's)."""
    blind = unseen_defaults(attrs)
    memo: dict[tuple[Any, ...], object] = {}

    def sglang_sets(attr: str) -> bool:
        """Whether an earlier step writes ``attr`` to the value the crash assumes it had."""
        have = attrs.get(attr)
        if have is None or have.value is UNKNOWN:
            return False
        return any(
            w.kind in ("write", "return_dict", "declare")
            and w.value == repr(have.value)
            and not write_fails(store, version, check, w, blind, facts)
            for w in earlier_writes(store, version, attr, check)
        )

    return frozenset(
        v.edit.key()
        for v in passing
        if not any(sglang_sets(a) for a in v.edit.remove)
        and fixes_check(
            store, version, check, v.edit, blind, facts, catalog, memo, facts_sig=fsig
        ).fixes_check
        is True
    )


def propose(ctx: CheckContext, ev: PathEvaluation, *, limit: int = 5) -> list[Verdict]:
    """The best ``limit`` candidate fixes for ``ctx``'s check, ranked by :func:`rank`.

    Every candidate's check is evaluated (phase 1); those that fix it are re-checked
    against the neighbouring checks (phase 2) best first, the ``limit`` best and a few
    spare, and on until one is clean when none of those is. When the check itself is
    undecided (``ev.fired`` unknown) or no candidate is shown to fix it cleanly, the list is
    filled up to ``limit`` with candidates whose verdict is unknown, ranked by intent, for
    replay to decide (``fixes_check`` UNKNOWN; never recommended). A check that
    evaluates false with these inputs gets none: the static picture contradicts the
    crash, and candidates ranked on it would be guesses.

    Without the user's command (:func:`~service.engine.fixes.implied.command_unknown`) and a
    check that does not fire on the defaults, the candidates are proposed for the flags the
    raised check implies (:func:`~service.engine.fixes.implied.implied_launch`), and each
    fix says what it assumed.

    ``ctx.facts_key`` keys the memo tables.
    """
    store, version, check, catalog = ctx.store, ctx.release, ctx.check, ctx.catalog
    parsed, attrs, facts, fsig = ctx.parsed, ctx.attrs, ctx.facts, ctx.facts_key
    assumed = ""
    unknown = command_unknown(parsed, attrs, catalog)
    # no command: propose for the flags the raised check implies (fixes/implied.py)
    launch = assumed_launch(
        store, version, check, ev, attrs, parsed, catalog, facts, facts_sig=fsig
    )
    if launch is not None and launch.evaluation is not None:
        ev, attrs, parsed, assumed = (
            launch.evaluation,
            launch.attrs,
            launch.parsed,
            launch.note(catalog),
        )
    refused = refused_values(ev)
    edits = [
        e
        for e in candidate_edits(store, version, check, ev, parsed, catalog, attrs, facts)
        if not sets_refused(e, refused)
    ]
    costs: Cost = {e.key(): intent_cost(e.set, e.remove, parsed, catalog, attrs) for e in edits}
    guard_memo: dict[tuple[Any, ...], object] = {}
    named = message_attrs(check, catalog)  # its subject: turning one off is no detour
    subject = named if unknown else frozenset()  # no command: the message says which flag
    passing: list[Verdict] = []
    undecided: list[Verdict] = []
    exit_only: set[tuple[Any, ...]] = set()
    for edit in edits:
        v = fixes_check(
            store, version, check, edit, attrs, facts, catalog, guard_memo, facts_sig=fsig
        )
        if v.fixes_check is UNKNOWN and v.evaluation is not None and still_fires(ev, v.evaluation):
            v.fixes_check = False  # only what the crash already held is undecided
        flip = guard_flip(edit, ev, named) if v.fixes_check is True else None
        if flip is not None:  # skips the check rather than fixing it: ranked after real fixes
            edit.skips = turns_off(edit, flip, parsed, catalog)
        if v.fixes_check is True and guard_flip(edit, ev) is not None:
            exit_only.add(edit.key())  # it passes the check at an early exit, named or not
        if v.fixes_check is True and v.evaluation is not None:  # an earlier sibling raises
            v.trips.extend(sibling_trips(check, v.evaluation))
        if v.fixes_check is True:
            passing.append(v)
        elif v.fixes_check is UNKNOWN:
            undecided.append(v)
    # the backend values a rule card refuses on these facts go (their notes stay on the
    # others): judged only for the flags some candidate that may be listed sets
    listed = {a for v in (*passing, *undecided) for a in v.edit.set}
    kept = {
        e.key()
        for e in screened(
            store,
            version,
            ev,
            edits,
            parsed,
            attrs,
            facts,
            lambda e: edited_attrs(attrs, e, catalog),
            facts_sig=fsig,
            among=listed,
        )
    }
    passing = [v for v in passing if v.edit.key() in kept]
    undecided = [v for v in undecided if v.edit.key() in kept]
    robust = (
        _robust(store, version, check, passing, attrs, facts, catalog, fsig) if unknown else None
    )
    # one order for every list below
    ordered = functools.partial(
        rank,
        ev=ev,
        costs=costs,
        skips_first=bool(assumed),
        named=subject,
        robust=robust,
        message=check.message or "",
        choices={a: spec.choices for a, spec in catalog.by_attr().items() if spec.choices},
        # the launch's values: without the command, only those the check implies
        current=(
            {a: pf.value for a, pf in parsed.values.items()}
            if unknown
            else {a: v.value for a, v in attrs.items()}
        ),
    )
    # phase 2 only for the most promising: neighbour re-checks are the costly part
    ranked = ordered(passing)
    wanted = limit + RECHECK_SPARE
    memo: dict[tuple[Any, ...], object] = {}
    checked: list[Verdict] = []
    for v in diverse(ranked, costs):  # other kinds of fix before a third value of one kind
        if len(checked) >= wanted and (any(c.ok for c in checked) or len(checked) >= 3 * wanted):
            break
        recheck_neighbours(store, version, check, v, attrs, facts, catalog, memo, facts_sig=fsig)
        checked.append(v)
    alternative = _best_giving_up(ranked, checked, costs)
    if alternative is not None:
        recheck_neighbours(
            store, version, check, alternative, attrs, facts, catalog, memo, facts_sig=fsig
        )
        checked.append(alternative)
    # drop supersets of a clean fix (dropping A and B when dropping A alone is enough); a
    # subset that passes the check only at an early exit does not count, even one on a flag
    # the message names (replay may refute it: the pair stays)
    out: list[Verdict] = []
    for v in ordered(checked):
        if any(
            o.ok
            and o.edit.key() not in exit_only
            and set(o.edit.remove) < set(v.edit.remove)
            and not o.edit.set
            and not v.edit.set
            for o in checked
        ):
            continue
        out.append(v)
    out = diverse(out, costs)[:limit]
    # when every fix listed keeps the request, the best clean one that gives part of it up is
    # listed too (last): the user's call, and the rule cards may refute the others
    alt = next(
        (v for v in ordered(checked) if v.ok and costs[v.edit.key()].features),
        None,
    )
    if (
        alt is not None
        and len(out) == limit
        and not any(costs[v.edit.key()].features for v in out)
        and alt not in out
    ):
        out[-1] = alt
    if (
        ev.fired is not False
        and (ev.fired is UNKNOWN or not any(v.ok for v in out))
        and len(out) < limit
    ):
        out += ordered(undecided)[: limit - len(out)]
    for v in out if assumed else []:
        v.edit.notes.append(assumed)
    return out
