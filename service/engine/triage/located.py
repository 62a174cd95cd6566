"""Locating the check that raised the log's exception, and evaluating it under the
command's flags, the values its message printed and the facts (:class:`Evaluated`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kb.code_types import Check
from kb.knowledge import KnowledgeBase
from kb.store import Store
from service.engine.answer import NotFlagProblem
from service.engine.cache import facts_signature
from service.engine.evaluate.message_facts import (
    MessageFacts,
    held_at_crash,
    message_facts,
    printed_flags,
)
from service.engine.evaluate.path_condition import PathEvaluation, base_attrs, evaluate_path
from service.engine.expr.interpreter import Value
from service.engine.flags.parse import ParsedArgs, parse_argv
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


@dataclass
class Evaluated:
    """The located check's path condition evaluated with the command (completed with the
    flags its message printed), the message's values and the facts."""

    check: Check
    argv: list[str]
    pargs: ParsedArgs
    attrs: dict[str, Value]
    facts: dict[str, Value]
    #: :func:`~service.engine.cache.facts_signature` of ``facts``: keys the stages' memos
    fsig: str
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
    fsig = facts_signature(facts)  # keys the memo tables of every stage below
    t = time.perf_counter()
    ev = held_at_crash(evaluate_path(store, version, check, attrs, facts, facts_sig=fsig), printed)
    timings["evaluate"] = ms(t)
    return Evaluated(
        check=check,
        argv=argv,
        pargs=pargs,
        attrs=attrs,
        facts=facts,
        fsig=fsig,
        printed=printed,
        ev=ev,
    )
