"""The answer to a log whose launch stopped at SGLang's argument parser: the nearest valid
spelling or choice as the fix, where the flag is declared, and how it fared in other
releases (:func:`~service.engine.locate.argparse.diagnose_argparse`). A log showing the
error line but no command gets the fix of the tokens the line shows (:func:`shown_tokens`),
marked as not the whole command."""

from __future__ import annotations

from kb.store import Store
from service.engine.answer import FixOut, Reference, TriageResult, jsonable
from service.engine.explain import across
from service.engine.explain import deterministic as explain
from service.engine.explain.display import edit_lines
from service.engine.flags.edit import render_command
from service.engine.logparse.argparse_errors import ArgparseError
from service.engine.triage.inputs import TriageInput, command_prefix, ms


def shown_tokens(err: ArgparseError) -> list[str]:
    """The command-line tokens an argparse error line shows by themselves (the strays of
    "unrecognized arguments: --reasoning_parser kimi_k2", the flag and value of "argument
    --attention-backend: invalid choice: 'fa9'"): a fragment of the command to fix when the
    log showed no command. Empty for the other kinds (their line shows no whole token)."""
    if err.kind == "unrecognized_arguments":
        return err.message.partition(":")[2].split()
    if err.kind == "invalid_choice" and err.flags and err.values:
        return [err.flags[0].split("/", 1)[0], err.values[0]]
    return []


def _dropped_line(line: str, shown: list[str]) -> str:
    """An edit line ``- --flag`` with the values that follow ``--flag`` in ``shown`` (the
    tokens of the error line: ``- --reasoning_parser kimi_k2``); other lines as they are."""
    flag = line[2:]
    if not line.startswith("- ") or flag not in shown:
        return line
    at = shown.index(flag) + 1
    end = next((i for i in range(at, len(shown)) if shown[i].startswith("-")), len(shown))
    return " ".join([line, *shown[at:end]])


def argparse_answer(
    store: Store, inp: TriageInput, timings: dict[str, float], t0: float
) -> TriageResult:
    """The ``argparse`` answer of ``inp`` (whose log holds an argparse error)."""
    from service.engine.locate.argparse import diagnose_argparse

    parsed, argv, version, base = inp.parsed, inp.argv, inp.version, inp.base
    err = parsed.argparse_error
    assert err is not None
    diag = diagnose_argparse(err, argv or None, store, version)
    fixed, edits = diag.fixed_argv, diag.edits
    shown = [] if argv else shown_tokens(err)
    if fixed is None and shown:  # no command: the fix of the tokens the error line shows
        partial = diagnose_argparse(err, shown, store, version, diag.parser)
        fixed, edits = partial.fixed_argv, partial.edits
    fixes: list[FixOut] = []
    if fixed is not None:
        for edit in edits[:1]:
            fix = FixOut(
                rank=1,
                set={k: jsonable(v) for k, v in edit.get("set", {}).items()},
                remove=list(edit.get("remove", [])),
                argv=fixed,
                command=render_command(fixed, prefix=command_prefix(parsed)),
                command_complete=bool(argv),
                origin="argparse: nearest valid spelling or choice",
                fixes_check="true",
                verdict=diag.explanation,
                recommended=True,
            )
            if not argv:  # each dropped flag with the values the line shows after it
                fix.edits = [_dropped_line(line, shown) for line in edit_lines(fix)]
            fixes.append(fix)
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
