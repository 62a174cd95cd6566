"""The located answer's assembly: where the check is (a cited excerpt), its rule in plain
words, the evaluation's atoms and unknowns, the explanation with its arithmetic, the
upgrade that drops or changes the check, and the citations everything rests on."""

from __future__ import annotations

from typing import Any

from kb.code_types import Check
from kb.store import Store
from service.engine.answer import (
    CheckInfo,
    EvaluationOut,
    ExcerptLine,
    Location,
    ModelFact,
    PrintedValue,
    TriageResult,
    UnknownFact,
    jsonable,
    tri,
)
from service.engine.explain import across, arithmetic
from service.engine.explain import deterministic as explain
from service.engine.explain.evaluation import (
    atoms_out,
    guards_text,
    no_fix_reason,
    undecided_reason,
    unknown_facts,
)
from service.engine.explain.references import references as explain_references
from service.engine.explain.rule import plain_rule
from service.engine.expr.interpreter import UNKNOWN
from service.engine.facts.from_log import field_rows
from service.engine.fixes.present import recommended_edit
from service.engine.fixes.upgrade import upgrade_fix, upgrade_no_fix, upgrade_phrase
from service.engine.locate.checked import doubt_unknowns
from service.engine.locate.localize import Located
from service.engine.logparse.frames import ExceptionInfo
from service.engine.triage.fix_list import FixList
from service.engine.triage.inputs import TriageInput, command_prefix, model_facts_for
from service.engine.triage.located import Evaluated


def located_answer(
    store: Store,
    inp: TriageInput,
    exc: ExceptionInfo,
    located: Located,
    evaluated: Evaluated,
    listed: FixList,
    timings: dict[str, float],
) -> TriageResult:
    """The ``located`` answer: ``located``'s check, ``evaluated`` under the command, with
    the fixes ``listed``. ``timings`` is the answer's (the caller completes it)."""
    version, catalog, parsed, base = inp.version, inp.catalog, inp.parsed, inp.base
    ctx, ev, printed, fixes = evaluated.ctx, evaluated.ev, evaluated.printed, listed.fixes
    check, attrs, facts, argv = ctx.check, ctx.attrs, ctx.facts, ctx.argv
    location = location_of(store, version, check, located)
    rule = plain_rule(check, version, catalog, ctx.parsed, location.citation)
    atoms = atoms_out(ev)
    unknowns = (
        doubt_unknowns(located, version)
        + unknown_facts(ev, inp.hw_name, inp.arch, argv)
        + listed.unknowns
    )
    no_fix = None
    if not any(f.fixes_check == "true" for f in fixes):  # undecided candidates only, or none
        no_fix = no_fix_reason(ev, check, undecided=bool(fixes))
    references = explain_references(store, version, ev.attrs, catalog, printed.traces)
    result: dict[str, Any] = {
        "condition": check.condition or guards_text(check),
        "rule": rule,
        "no_flag_fix": no_fix,
        "undecided": undecided_reason(ev),
    }
    caveats = ev.caveats + printed.notes
    conf = round(
        min(inp.resolution.confidence, located.confidence)
        * (0.7 if ev.fired is UNKNOWN else 1.0)
        * (0.5 if ev.fired is False else 1.0),
        3,
    )
    if ev.fired is False:
        unknowns.insert(
            0,
            UnknownFact(
                what="why the check fired",
                why="with the flags and facts given, the check's condition evaluates to false",
                settle="the full launch command, the hardware (--hardware) and the model "
                "architecture, or a replay of the release's validation",
            ),
        )
    md = explain.markdown(
        result,
        location,
        atoms,
        fixes,
        unknowns,
        version,
        [r.model_dump() for r in references],
        caveats + located.notes,
    )
    sums = arithmetic.sentence(
        ev.test.condition if ev.test else None,
        attrs,
        facts,
        recommended_edit(fixes, listed.pairs, attrs, catalog),
    )
    md += f"\n\n**The arithmetic:** {sums}" if sums else ""
    later, upgrade, differences = across.check_changes(store, version, check, base["release"])
    up = upgrade_fix(
        store,
        version,
        check,
        later,
        argv,
        parsed.server_args,
        facts,
        prefix=command_prefix(parsed),
        fired_here=ev.fired is True,
        facts_sig=ctx.facts_key,
    )
    if up is not None and up.sure:
        no_fix = no_fix and upgrade_no_fix(up, no_fix)
        md = explain.upgrade_paragraph(up) + md
    md += across.release_notes(base["release"], upgrade, differences)
    citations = [location.citation] + [r.citation for r in references]
    citations += [c for ch in later for c in ch.citations if c not in citations]
    citations += [
        c for c in [*listed.registered, *(up.citations if up else [])] if c not in citations
    ]
    return TriageResult(
        **{**base, "status": "located", "confidence": conf},
        summary=explain.summary(
            exc.type,
            exc.bare,
            location,
            atoms,
            [f for f in fixes if f.fixes_check == "true"],
            version,
            upgrade=upgrade_phrase(up) if up and up.sure else None,
            given=frozenset(ctx.parsed.values),
        ),
        explanation=md,
        location=location,
        check=CheckInfo(
            id=check.id,
            kind=check.kind,
            exc_type=check.exc_type,
            bare=check.bare,
            condition=check.condition,
            message=check.message,
            guards=check.guards,
        ),
        evaluation=EvaluationOut(
            fired=tri(ev.fired), atoms=atoms, caveats=caveats, writes=ev.write_notes
        ),
        fixes=fixes,
        no_flag_fix=no_fix,
        references=references,
        unknowns=unknowns,
        citations=citations,
        later_releases=later,
        upgrade=upgrade,
        upgrade_fix=up,
        timings_ms=timings,
        rule=rule,
        arithmetic=sums,
        printed=[
            PrintedValue(
                expr=p.bound.expr,
                text=p.bound.text,
                role=p.role,
                value=jsonable(p.bound.value),
                attr=p.attr,
                note=p.note,
            )
            for p in printed.printed
        ],
        model_facts=model_facts_for(
            parsed, inp.model, read := {i.name for a in atoms for i in a.inputs}
        )
        + [ModelFact(**r) for r in field_rows(inp.log_fields, read)],
    )


def location_of(store: Store, version: str, check: Check, located: Located) -> Location:
    """Where ``check`` is in ``version``: its span cited, an excerpt with a few lines
    around it (its own highlighted), how it was located and the alternatives."""
    start = max(1, check.start_line - 4)
    end = check.end_line + 3
    lines = store.file_lines(version, check.path, start, end)
    excerpt = [
        ExcerptLine(
            line=start + i,
            text=text,
            highlight=check.start_line <= start + i <= check.end_line,
        )
        for i, text in enumerate(lines)
    ]
    span = (
        f"{check.start_line}-{check.end_line}"
        if check.end_line != check.start_line
        else str(check.start_line)
    )
    return Location(
        path=check.path,
        function=check.function,
        start_line=check.start_line,
        end_line=check.end_line,
        reported_line=located.reported_line,
        # Located.method (locate/localize.py) is a plain str holding one of these Literals
        method=located.method,
        confidence=located.confidence,
        citation=f"{version}:{check.path}:{span}",
        excerpt=excerpt,
        alternatives=[f"{version}:{a.path}:{a.start_line}" for a in located.alternatives],
    )
