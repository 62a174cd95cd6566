"""Repair a fix that trips a rule card: extend it by one edit that satisfies the card.

A fix can make the crashed check pass and still lead into another refusal,
which the rule cards predict: dropping ``--disaggregation-decode-host-receive-
threshold`` from a command that also asks for ``--enable-hisparse`` fixes the
threshold check, but hierarchical sparse attention then requires
``--disable-radix-cache``. When no proposed fix is clean, :func:`repair` takes
each fix that violates exactly one error card (one that ``--model-path`` alone
would not violate), and extends it with the edits the linter derives from that
card (its ``fix_hints``, a value its ``require`` accepts, dropping a flag it
requires, see :func:`~service.engine.rules.lint.card_candidates`). An extension is
kept only if it still makes the check pass with no neighbouring check firing
(:func:`~service.engine.fixes.propose.verify`) and then violates no error card at all; the caller
puts the card verdicts on it like on any other fix, and lists the fix it
extends right after it (that single edit, and the card it trips, are why the
extra edit is there). Nothing is offered that was not checked.
"""

from __future__ import annotations

from typing import Any

from service.engine.answer import FixOut
from service.engine.evaluate.context import CheckContext
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.propose import verify
from service.engine.flags.edit import apply_edits
from service.engine.rules.checker import cards_for, check_fix
from service.engine.rules.lint import card_candidates

#: Fixes (best first) that are tried, and extensions kept in all.
MAX_REPAIRED = 3
MAX_KEPT = 2


def _violated(fix: FixOut) -> list[str]:
    """Error cards ``fix`` violates, but for those ``--model-path`` alone violates (marked
    ``background`` by :func:`~service.engine.rules.checker.check_fix`)."""
    return [
        v.rule
        for v in fix.rule_verdicts
        if v.verdict == "violated" and v.severity == "error" and not v.background
    ]


def _extended(edit: Edit, set_: dict[str, Any], remove: list[str], note: str) -> Edit | None:
    """``edit`` plus another edit, or None when the two disagree (one undoes the other)."""
    if (
        set(set_) & set(edit.remove)
        or set(remove) & set(edit.set)
        or any(k in edit.set and edit.set[k] != v for k, v in set_.items())
    ):
        return None
    merged = Edit(
        set={**edit.set, **set_},
        remove=sorted(set(edit.remove) | set(remove)),
        origin=f"{edit.origin}, then {note}",
    )
    return None if merged.key() == edit.key() else merged


def repair(ctx: CheckContext, pairs: list[tuple[Verdict, FixOut]]) -> list[tuple[FixOut, Verdict]]:
    """Verified extensions of the proposed fixes (each verdict with its fix, the card
    verdicts already on it) that violate one error card, best-ranked fixes first, each
    with the fix it extends; empty when a fix is already clean or none can be repaired."""
    if any(f.recommended for _, f in pairs):
        return []
    store, version, check, catalog = ctx.store, ctx.release, ctx.check, ctx.catalog
    argv, parsed, attrs, facts = ctx.argv, ctx.parsed, ctx.attrs, ctx.facts
    facts_sig = ctx.facts_key
    cards = {c.id: c for c in cards_for(store, version)}
    seen = {v.edit.key() for v, _ in pairs}
    out: list[tuple[FixOut, Verdict]] = []
    for v, fix in sorted(pairs, key=lambda p: p[1].rank)[:MAX_REPAIRED]:
        rules = _violated(fix)
        if len(rules) != 1 or rules[0] not in cards or fix.fixes_check != "true" or fix.trips:
            continue
        card = cards[rules[0]]
        user = set(parsed.values) | set(v.edit.set)
        for set_, remove, origin in card_candidates(card, user, catalog):
            edit = _extended(v.edit, set_, remove, f"{origin} ({card.id})")
            if edit is None or edit.key() in seen:
                continue
            seen.add(edit.key())
            again = verify(store, version, check, edit, attrs, facts, catalog)
            if not again.ok:
                continue
            new_argv = apply_edits(argv, catalog, set=dict(edit.set), remove=list(edit.remove))
            if check_fix(store, version, new_argv, facts, facts_sig=facts_sig)[1]:
                continue  # still (or newly) violates an error card
            out.append((fix, again))
            break
        if len(out) >= MAX_KEPT:
            break
    return out
