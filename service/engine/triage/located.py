"""Locating the check that raised the log's exception, and evaluating it under the
command's flags, the values its message printed and the facts (:class:`Evaluated`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kb.knowledge import KnowledgeBase
from kb.store import Store
from service.engine.answer import NotFlagProblem
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.message_facts import (
    MessageFacts,
    held_at_crash,
    message_facts,
    printed_flags,
)
from service.engine.evaluate.path_condition import PathEvaluation, base_attrs, evaluate_check
from service.engine.flags.parse import parse_argv
from service.engine.locate.checked import search_locate
from service.engine.locate.elsewhere import not_a_flag_problem
from service.engine.locate.localize import Located, locate_by_frames, locate_by_message
from service.engine.logparse.frames import ExceptionInfo
from service.engine.triage.inputs import TriageInput, ms


def locate(
    kb: KnowledgeBase, inp: TriageInput, exc: ExceptionInfo, timings: dict[str, float]
) -> tuple[Located | None, NotFlagProblem | None]:
    """The check of the release that raised ``exc`` (the consistency step's, else by frames,
    else by message, else by search), or why it is not a launch-flag problem; timing
    ``locate`` is recorded in ``timings``."""
    store, version, scope = kb.store, inp.version, inp.scope
    t = time.perf_counter()
    located = inp.rechecked or (
        locate_by_frames(exc, store, version, inp.resolution.line_offsets)
        or locate_by_message(exc, store, version, scope)
    )
    # raised outside SGLang's checks (another package, a version skew): said so, before
    # a search that would find the nearest-sounding check instead
    elsewhere = None if located else not_a_flag_problem(exc, store, version, inp.catalog)
    if located is None and elsewhere is None:
        located = search_locate(kb, exc, version, scope)
    timings["locate"] = ms(t)
    return located, elsewhere


@dataclass(frozen=True)
class Evaluated:
    """The located check's path condition evaluated with the command (completed with the
    flags its message printed), the message's values and the facts: ``ctx`` is what the
    later stages (fixes, repair, rule cards, the LLM step) judge the check with."""

    ctx: CheckContext
    printed: MessageFacts
    ev: PathEvaluation


def evaluate_located(
    store: Store,
    inp: TriageInput,
    exc: ExceptionInfo,
    located: Located,
    timings: dict[str, float],
) -> Evaluated:
    """Evaluate ``located``'s check; a command completed with flags the message printed
    extends ``inp.argv`` and is noted on ``located``. Timing ``evaluate`` is recorded."""
    version, catalog, parsed = inp.version, inp.catalog, inp.parsed
    argv, pargs = inp.argv, inp.pargs
    check = located.check
    attrs = base_attrs(catalog, pargs, parsed.server_args)
    printed = message_facts(store, version, check, exc.message, attrs, set(pargs.values))
    facts = {**inp.facts, **printed.facts}
    completed = printed_flags(printed, catalog)
    if completed:  # the crashed process ran with them: the fix's full command keeps them
        argv += completed
        pargs = parse_argv(argv, catalog)
        attrs = base_attrs(catalog, pargs, parsed.server_args)
        located.notes.append(
            f"the command is completed with `{' '.join(completed)}`, printed in the message"
        )
    attrs.update(printed.attrs)
    ctx = CheckContext(
        store=store,
        release=version,
        catalog=catalog,
        check=check,
        argv=argv,
        parsed=pargs,
        attrs=attrs,
        facts=facts,
    )  # its facts key keys the memo tables of every stage below
    t = time.perf_counter()
    ev = held_at_crash(evaluate_check(ctx), printed)
    timings["evaluate"] = ms(t)
    return Evaluated(ctx=ctx, printed=printed, ev=ev)
