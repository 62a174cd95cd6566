"""The answer to a log whose launch stopped at SGLang's argument parser: the nearest valid
spelling or choice as the fix, where the flag is declared, and how it fared in other
releases (:func:`~service.engine.locate.argparse.diagnose_argparse`)."""

from __future__ import annotations

from kb.store import Store
from service.engine.answer import FixOut, Reference, TriageResult, jsonable
from service.engine.explain import across
from service.engine.explain import deterministic as explain
from service.engine.flags.edit import render_command
from service.engine.triage.inputs import TriageInput, command_prefix, ms


def argparse_answer(
    store: Store, inp: TriageInput, timings: dict[str, float], t0: float
) -> TriageResult:
    """The ``argparse`` answer of ``inp`` (whose log holds an argparse error)."""
    from service.engine.locate.argparse import diagnose_argparse

    parsed, argv, version, base = inp.parsed, inp.argv, inp.version, inp.base
    err = parsed.argparse_error
    assert err is not None
    diag = diagnose_argparse(err, argv or None, store, version)
    fixes: list[FixOut] = []
    if diag.fixed_argv is not None:
        for edit in diag.edits[:1]:
            fixes.append(
                FixOut(
                    rank=1,
                    set={k: jsonable(v) for k, v in edit.get("set", {}).items()},
                    remove=list(edit.get("remove", [])),
                    argv=diag.fixed_argv,
                    command=render_command(diag.fixed_argv, prefix=command_prefix(parsed)),
                    origin="argparse: nearest valid spelling or choice",
                    fixes_check="true",
                    verdict=diag.explanation,
                    recommended=True,
                )
            )
    cite = f"{version}:{diag.flag_line[0]}:{diag.flag_line[1]}" if diag.flag_line else None
    summary = diag.explanation.split(". ")[0][:200]
    md = diag.explanation + (f"\n\nDeclared at `{cite}`." if cite else "")
    if diag.history:
        md += "\n\n" + "\n".join(f"- {h.note}" for h in diag.history if h.note)
    later, upgrade = across.flag_changes(diag.history, version)
    if upgrade:
        md += f"\n\n**Other releases:** {upgrade}."
    md += across.release_notes(base["release"], None, [])
    timings["total"] = ms(t0)
    return TriageResult(
        **{**base, "status": "argparse", "confidence": inp.resolution.confidence},
        later_releases=later,
        upgrade=upgrade,
        summary=" ".join(summary.split()[: explain.SUMMARY_WORDS]),
        explanation=md,
        fixes=fixes,
        citations=[cite] if cite else [],
        timings_ms=timings,
        references=[Reference(kind="help", citation=cite, text=diag.flag or "")] if cite else [],
    )
