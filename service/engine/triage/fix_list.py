"""The fixes a located answer lists: the module's post-validation candidates and the
proposer's, each judged against the failing check and its neighbours, shown in the user's
spellings, ranked by the rule cards' verdicts and, when none is clean, repaired
(:class:`FixList`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from service.engine.answer import FixOut, UnknownFact
from service.engine.evaluate.context import CheckContext
from service.engine.fixes.candidates import post_validation_verdicts
from service.engine.fixes.implied import command_whole
from service.engine.fixes.model import Verdict
from service.engine.fixes.present import fix_out, with_bases
from service.engine.fixes.propose import propose
from service.engine.fixes.repair import repair
from service.engine.logparse.frames import ExceptionInfo
from service.engine.triage.inputs import TriageInput, command_prefix, ms
from service.engine.triage.located import Evaluated

#: fixes an answer lists; candidates proposed beyond them, for the rule cards to rank
MAX_FIXES = 5
CARD_SPARE = 3


@dataclass
class FixList:
    """The fixes of a located answer (best first) and what they rest on."""

    fixes: list[FixOut]
    #: each listed (not repaired) fix with the verdict it was shown from
    pairs: list[tuple[Verdict, FixOut]]
    #: the citations of the module's registered candidates
    registered: list[str]
    #: what is not known about the module's candidates
    unknowns: list[UnknownFact]


def list_fixes(
    inp: TriageInput,
    exc: ExceptionInfo,
    evaluated: Evaluated,
    timings: dict[str, float],
) -> FixList:
    """The fixes of ``evaluated``'s check; timings ``fixes`` (candidates judged) and
    ``rules`` (rule cards and repair) are recorded in ``timings``."""
    ctx = evaluated.ctx
    version, catalog, argv, pargs = ctx.release, ctx.catalog, ctx.argv, ctx.parsed
    prefix = command_prefix(inp.parsed)
    # whole: it has the model path, names a config file, or the log gave the server arguments
    complete = command_whole(pargs, ctx.attrs, catalog)
    t = time.perf_counter()
    post = post_validation_verdicts(ctx, evaluated.printed, exc.message)
    verdicts, registered = post.verdicts, post.citations
    verdicts += [
        v
        for v in propose(ctx, evaluated.ev, limit=MAX_FIXES + CARD_SPARE)
        if all(v.edit.key() != r.edit.key() for r in verdicts)
    ]
    verdicts += [v for v in post.tripped if all(v.edit.key() != r.edit.key() for r in verdicts)]
    timings["fixes"] = ms(t)
    fixes = [
        fix_out(i + 1, v, argv, catalog, pargs, version, prefix=prefix, complete=complete)
        for i, v in enumerate(verdicts)
    ]
    t = time.perf_counter()
    pairs = list(zip(verdicts, fixes, strict=True))  # before the re-ranking below
    judged = rule_verdicts(ctx, fixes, keep=MAX_FIXES)
    del fixes[MAX_FIXES:]  # the best after the rule cards had their say
    pairs = [p for p in pairs if any(p[1] is f for f in fixes)]
    repaired = repair(ctx, pairs)
    if repaired:  # no fix was clean: the clean extensions join the list
        added = [
            fix_out(
                len(fixes) + i + 1,
                v,
                argv,
                catalog,
                pargs,
                version,
                prefix=prefix,
                complete=complete,
            )
            for i, (_, v) in enumerate(repaired)
        ]
        rule_verdicts(ctx, fixes + added, judged)
        fixes = with_bases(added, [base for base, _ in repaired], fixes)
    timings["rules"] = ms(t)
    return FixList(fixes=fixes, pairs=pairs, registered=registered, unknowns=post.unknowns)


def rule_verdicts(
    ctx: CheckContext,
    fixes: list[FixOut],
    judged: dict[int, bool] | None = None,
    *,
    keep: int | None = None,
) -> dict[int, bool]:
    """Put the rule cards' verdicts (in ``ctx``'s release, with its facts) on every fix not
    already in ``judged``; recommend the best fix that violates no error-severity card
    (re-ranking the clean ones first).

    The order is: statically verified fixes before undecided ones, within each the fixes
    that violate no error card first, then by rank. With ``keep``, only the first ``keep``
    places of that order are wanted: fixes are judged in the order they could take them
    and judging stops once those places are settled (the fixes not judged sort last, with
    no verdicts). Returns ``judged`` (``id`` of each judged fix -> violates an error card),
    so that a later call with more fixes judges only the new ones.
    """
    bad: dict[int, bool] = dict(judged or {})
    left = len(fixes) if keep is None else keep  # places still to settle
    for group in _groups(fixes):
        clean = 0
        for f in group:
            if clean >= left:
                break  # the group's first clean fixes take the places left
            if id(f) not in bad:
                bad[id(f)] = _judge(ctx, f)
            clean += not bad[id(f)]
        left -= len(group)  # a fully judged group takes its size in places
        if left <= 0 or clean >= left + len(group):
            break

    def order(f: FixOut) -> tuple[bool, bool, int]:
        if id(f) not in bad:  # not judged: after every judged fix
            return True, True, (1 << 30) + f.rank
        return f.fixes_check != "true", bad[id(f)], f.rank

    fixes.sort(key=order)
    for i, f in enumerate(fixes, start=1):
        f.rank = i
    for f in fixes:
        if not bad.get(id(f), True) and f.fixes_check == "true" and not f.trips:
            f.recommended = True
            break
    return bad


def _groups(fixes: list[FixOut]) -> list[list[FixOut]]:
    """The statically verified fixes, then the others, each by rank."""
    ranked = sorted(fixes, key=lambda f: f.rank)
    verified = [f for f in ranked if f.fixes_check == "true"]
    return [verified, [f for f in ranked if f.fixes_check != "true"]]


def _judge(ctx: CheckContext, fix: FixOut) -> bool:
    """Set ``fix``'s rule verdicts; whether it violates an error-severity card."""
    from service.engine.rules.checker import check_fix

    verdicts, violates = check_fix(
        ctx.store, ctx.release, fix.argv, ctx.facts, facts_sig=ctx.facts_key
    )
    fix.rule_verdicts = verdicts
    if violates:
        worst = next(
            (v for v in verdicts if v.verdict == "violated" and v.severity == "error"), None
        )
        fix.verdict += f"; violates rule {worst.rule}" if worst else "; violates a rule card"
    return violates
