"""The answers that name no check: a log with a launch command but no error
(:func:`no_exception_answer`), and an exception no check of the release matches
(:func:`unlocated_answer`), said to be "not a launch-flag problem" when it was raised in
another package or by a version skew."""

from __future__ import annotations

from service.engine.answer import NotFlagProblem, TriageResult, UnknownFact
from service.engine.explain import deterministic as explain
from service.engine.logparse.frames import ExceptionInfo
from service.engine.triage.inputs import TriageInput, ms


def no_exception_answer(inp: TriageInput, timings: dict[str, float], t0: float) -> TriageResult:
    """The answer for a log holding a launch command but no exception or error message:
    unlocated, saying what to send (``parsed.notes`` name what was missing)."""
    timings["total"] = ms(t0)
    unknown = UnknownFact(
        what="the failing check",
        why="the log holds a launch command but no exception, error message or argparse error",
        settle="the traceback or the error line SGLang printed before exiting",
    )
    return TriageResult(
        **{**inp.base, "confidence": 0.0},
        summary=f"Read the launch command, but found no error to explain (SGLang {inp.version}).",
        explanation="The log holds a launch command but no exception, error "
        "message or argparse error. Nothing is claimed about why "
        "the server stopped.",
        unknowns=[unknown],
        timings_ms=timings,
    )


def unlocated_answer(
    inp: TriageInput,
    exc: ExceptionInfo,
    elsewhere: NotFlagProblem | None,
    timings: dict[str, float],
    t0: float,
) -> TriageResult:
    """The answer for ``exc`` when no check of the release matched it: ``elsewhere`` says
    it is not a launch-flag problem (raised outside SGLang's checks), else nothing is
    claimed about its cause."""
    version, base, conf = inp.version, inp.base, inp.resolution.confidence
    timings["total"] = ms(t0)
    if elsewhere is not None:
        return TriageResult(
            **{**base, "confidence": round(conf * 0.6, 3)},
            not_flag_problem=elsewhere,
            summary=f"Not a launch-flag problem: {exc.type} from {elsewhere.package}.",
            explanation=explain.not_flag_paragraph(elsewhere),
            no_flag_fix=f"not a launch-flag problem: {elsewhere.reason}",
            citations=list(elsewhere.citations),
            timings_ms=timings,
            unknowns=[
                UnknownFact(
                    what="what was not checked",
                    why="; ".join(elsewhere.not_checked),
                    settle=f"`pip list` (the {elsewhere.package} and sglang "
                    "versions) and the full traceback",
                )
            ],
        )
    unknown = UnknownFact(
        what="the failing check",
        why=f"the {exc.type} could not be matched to a check of {version} by frame, message or search",
        settle='the full traceback (with the File ".../sglang/...", line N frames) or the exact release',
    )
    return TriageResult(
        **{**base, "confidence": round(conf * 0.2, 3)},
        summary=f"Could not locate this {exc.type} in SGLang {version}.",
        explanation=f"No check of {version} matches this {exc.type}. "
        "Nothing is claimed about its cause.",
        unknowns=[unknown],
        timings_ms=timings,
    )
