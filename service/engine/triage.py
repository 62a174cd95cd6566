"""The triage engine: crash log in, grounded diagnosis and checked fixes out.

``Engine(kb).triage(payload)`` runs, in order: parse the log
(:mod:`service.engine.logparse.parse`), resolve the release (:mod:`service.engine.release.resolve`), locate the check
(:mod:`service.engine.locate.localize`), evaluate its path condition (:mod:`service.engine.evaluate.path_condition`), propose
and verify fixes (:mod:`service.engine.fixes.propose`), and write the summary and cited
explanation (:mod:`service.engine.explain.deterministic`). It is deterministic and offline; the optional
LLM layer and replay run on top of its result.
"""

from __future__ import annotations

import time
from typing import Any

from kb.catalogs import load_catalog
from kb.knowledge import KnowledgeBase
from service.engine.answer import (
    CheckInfo,
    EvaluationOut,
    ExcerptLine,
    FixOut,
    HardwareSource,
    Location,
    ModelFact,
    NotFlagProblem,
    ParsedSummary,
    PrintedValue,
    Reference,
    TriageResult,
    UnknownFact,
    jsonable,
    tri,
)
from service.engine.cache import facts_signature, freeze_long_lived
from service.engine.errors import NoCrashFound, UnknownRelease
from service.engine.evaluate.message_facts import held_at_crash, message_facts, printed_flags
from service.engine.evaluate.path_condition import base_attrs, evaluate_path
from service.engine.explain import across, arithmetic
from service.engine.explain import deterministic as explain
from service.engine.explain.evaluation import (  # noqa: F401 - re-exported (tests use them)
    _atoms,
    _guards_text,
    _no_fix_reason,
    _undecided,
    _unknowns,
)
from service.engine.explain.references import references as explain_references
from service.engine.explain.rule import plain_rule
from service.engine.expr.interpreter import UNKNOWN, Provenance, Value, fact_key
from service.engine.facts.checkpoint import checkpoint_facts, checkpoint_info, fact_rows, flag_value
from service.engine.facts.core import HardwareProfile, fact_values, get_profile, model_arch_for
from service.engine.facts.from_log import (
    field_rows,
    hardware_from_log,
    log_lines,
    log_model_facts,
    model_fields_from_log,
)
from service.engine.fixes.candidates import post_validation_verdicts
from service.engine.fixes.present import fix_out, recommended_edit, with_bases
from service.engine.fixes.propose import Verdict, propose
from service.engine.fixes.repair import repair
from service.engine.fixes.upgrade import upgrade_fix, upgrade_no_fix, upgrade_phrase
from service.engine.flags.edit import render_command
from service.engine.flags.parse import ParsedArgs, parse_argv
from service.engine.llm.writer import AssistContext, assist
from service.engine.llm.writer import enabled as llm_enabled
from service.engine.locate.checked import doubt_unknowns, search_locate
from service.engine.locate.elsewhere import not_a_flag_problem
from service.engine.locate.localize import Located, locate_by_frames, locate_by_message
from service.engine.locate.scope import launch_scope
from service.engine.logparse.parse import ParsedLog, parse_input
from service.engine.release.consistency import recheck_release
from service.engine.release.resolve import resolve_release
from service.engine.release.versions import parse_version
from service.engine.settings import EngineSettings

#: fixes an answer lists; candidates proposed beyond them, for the rule cards to rank
MAX_FIXES = 5
CARD_SPARE = 3
#: a triage this slow built caches (or loaded the query encoder): freeze what it built
_SETTLE_AFTER_MS = 250.0


class Engine:
    """Stateless apart from the KB handle; safe to share between threads."""

    def __init__(self, kb: KnowledgeBase, settings: EngineSettings | None = None) -> None:
        self.kb = kb
        self.store = kb.store
        if settings is None:
            given = kb.settings
            settings = (
                given
                if isinstance(given, EngineSettings)
                else EngineSettings.model_validate(given.model_dump())
            )
        self.settings = settings

    # -- facts ------------------------------------------------------------------------
    def facts_for(
        self,
        parsed: ParsedLog,
        hardware: str | None,
        model: str | None,
        model_arch: str | None,
        found: tuple[HardwareProfile | None, HardwareSource | None] | None = None,
    ) -> tuple[dict[str, Value], str | None, str | None]:
        """(facts, hardware profile name, architecture) of a triage; ``found`` is
        :meth:`hardware_for`'s answer when the caller has it already."""
        hw, source = found if found is not None else self.hardware_for(parsed, hardware)
        ckpt = checkpoint_info(model or parsed.model)  # config.json / HF cache / known model
        ckpt_arch = ckpt.architectures[0] if ckpt is not None and ckpt.architectures else None
        arch = model_arch or ckpt_arch or model_arch_for(model or parsed.model)
        origin = source.evidence if source is not None and source.source == "log" else None
        facts = dict(fact_values(hw, arch, parsed.env, hw_origin=origin))
        if ckpt is not None:
            facts.update(
                checkpoint_facts(
                    ckpt, flag_value(parsed.command, "--quantization"), declared_arch=model_arch
                )
            )
        if arch:
            key = fact_key("self.get_model_config().hf_config.architectures")
            facts.setdefault(key, Value([arch], Provenance("fact", f"model architecture {arch}")))
        return facts, (hw.name if hw else None), arch

    @staticmethod
    def hardware_for(
        parsed: ParsedLog, hardware: str | None
    ) -> tuple[HardwareProfile | None, HardwareSource | None]:
        """The hardware profile of a triage and its source: the declared ``hardware``
        always wins; without it, the closest profile to the GPUs the log printed
        (:func:`~service.engine.facts.from_log.hardware_from_log`); else none."""
        if hardware:
            hw = get_profile(hardware)
            return hw, HardwareSource(name=hw.name, source="request")
        found = (
            hardware_from_log(
                parsed.gpus, env=parsed.env, server_args=parsed.server_args, command=parsed.command
            )
            if parsed.gpus
            else None
        )
        if found is None:
            return None, None
        return found.profile, HardwareSource(
            name=found.profile.name, source="log", evidence=found.evidence, detail=found.detail
        )

    def model_facts_for(
        self, parsed: ParsedLog, model: str | None, read: set[str] | None = None
    ) -> list[ModelFact]:
        """The checkpoint facts :meth:`facts_for` supplied, as ``TriageResult.model_facts``;
        ``used`` marks those whose evaluator keys are in ``read`` (the keys the evaluated
        condition looked up)."""
        ckpt = checkpoint_info(model or parsed.model)
        if ckpt is None:
            return []
        rows = fact_rows(ckpt, flag_value(parsed.command, "--quantization"))
        return [
            ModelFact(
                name=r.name,
                value=jsonable(r.value),
                source=r.source,
                detail=r.detail,
                used=bool(read and read.intersection(r.keys)),
            )
            for r in rows
        ]

    @staticmethod
    def checkpoint_notes(parsed: ParsedLog, model: str | None) -> list[str]:
        """Why the checkpoint's ``config.json`` was skipped (too big, not JSON), if it was."""
        ckpt = checkpoint_info(model or parsed.model)
        return list(ckpt.notes[:3]) if ckpt is not None else []

    # -- main -------------------------------------------------------------------------
    def triage(
        self,
        payload: str | bytes | dict[str, Any],
        *,
        release: str | None = None,
        hardware: str | None = None,
        model: str | None = None,
        model_arch: str | None = None,
        max_bytes: int = 1024 * 1024,
        parsed_input: tuple[ParsedLog, dict[str, Any]] | None = None,
    ) -> TriageResult:
        """Triage ``payload``. ``parsed_input`` is what :func:`parse_input` gave for this
        same payload, when the caller parsed it already (the log is then not parsed again)."""
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        if parsed_input is None:
            parsed_input = parse_input(payload, max_bytes=max_bytes)
        parsed, extras = parsed_input
        timings["parse"] = _ms(t0)
        release = release or extras.get("release")
        if release is not None and parse_version(str(release)) is None:
            raise UnknownRelease(
                f"{str(release)[:100]!r} is not an SGLang version (say 0.5.11)",
                details={"release": str(release)[:100]},
            )
        hardware = hardware or extras.get("hardware")
        model = model or (extras.get("model") if isinstance(extras.get("model"), str) else None)
        if not self.store.releases():
            raise UnknownRelease("the KB holds no releases; run `sglang-triage ingest --defaults`")
        t = time.perf_counter()
        resolution = resolve_release(parsed, self.store, explicit=release)
        timings["resolve"] = _ms(t)
        if resolution.release is None:
            raise UnknownRelease(
                "no ingested release matches this log",
                details={"understood": _understood(parsed), **resolution.model_dump()},
            )
        found = self.hardware_for(parsed, hardware)
        facts, hw_name, arch = self.facts_for(parsed, hardware, model, model_arch, found)
        log_fields = model_fields_from_log(log_lines(payload, max_bytes))  # what SGLang printed
        facts.update(log_model_facts(log_fields))
        scope = launch_scope(parsed, model=model, model_arch=arch, text=_log_text(payload))
        recheck = recheck_release(self.store, parsed, resolution, facts, scope)  # consistency
        resolution, version = recheck.resolution, str(recheck.resolution.release)
        catalog = load_catalog(self.store, version)
        argv = list(parsed.command or [])
        pargs = parse_argv(argv, catalog)
        summary_parsed = ParsedSummary(
            exception=parsed.primary.type if parsed.primary else None,
            message=parsed.primary.message if parsed.primary else None,
            bare=parsed.primary.bare if parsed.primary else None,
            python=parsed.python_version,
            command=parsed.command,
            model=model or parsed.model,
            model_arch=arch,
            hardware=hw_name,
            env=parsed.env,
            notes=[f"partial log: missing {m}" for m in parsed.missing]
            + parsed.notes[:10]
            + self.checkpoint_notes(parsed, model),
        )
        base = dict(
            status="unlocated",
            release=resolution.model_dump(),
            parsed=summary_parsed,
            confidence=0.0,
            hardware=found[1],
        )
        if parsed.argparse_error is not None:
            return self._argparse(parsed, argv, version, resolution.confidence, base, timings, t0)
        exc = parsed.primary
        if exc is None:
            if parsed.command is None:
                raise NoCrashFound(
                    "no exception to triage", details={"understood": _understood(parsed)}
                )
            return self._no_exception(version, base, timings, t0)
        t = time.perf_counter()
        located = recheck.located or (
            locate_by_frames(exc, self.store, version, resolution.line_offsets)
            or locate_by_message(exc, self.store, version, scope)
        )
        # raised outside SGLang's checks (another package, a version skew): said so, before
        # a search that would find the nearest-sounding check instead
        elsewhere = None if located else not_a_flag_problem(exc, self.store, version, catalog)
        if located is None and elsewhere is None:
            located = search_locate(self.kb, exc, version, scope)
        timings["locate"] = _ms(t)
        if located is None:
            return self._unlocated(
                exc, version, base, timings, t0, resolution.confidence, elsewhere
            )
        check = located.check
        attrs = base_attrs(catalog, pargs, parsed.server_args)
        printed = message_facts(self.store, version, check, exc.message, attrs, set(pargs.values))
        facts = {**facts, **printed.facts}
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
        ev = held_at_crash(
            evaluate_path(self.store, version, check, attrs, facts, facts_sig=fsig), printed
        )
        timings["evaluate"] = _ms(t)
        t = time.perf_counter()
        post = post_validation_verdicts(
            self.store,
            version,
            check,
            printed,
            exc.message,
            catalog,
            pargs,
            attrs,
            facts,
            facts_sig=fsig,
        )
        verdicts, registered = post.verdicts, post.citations
        verdicts += [
            v
            for v in propose(
                self.store,
                version,
                check,
                ev,
                pargs,
                catalog,
                attrs,
                facts,
                limit=MAX_FIXES + CARD_SPARE,
                facts_sig=fsig,
            )
            if all(v.edit.key() != r.edit.key() for r in verdicts)
        ]
        verdicts += [v for v in post.tripped if all(v.edit.key() != r.edit.key() for r in verdicts)]
        timings["fixes"] = _ms(t)
        location = self._location(version, check, located)
        rule = plain_rule(check, version, catalog, pargs, location.citation)
        atoms = _atoms(ev)
        fixes = [
            self._fix_out(i + 1, v, argv, catalog, parsed, version, pargs)
            for i, v in enumerate(verdicts)
        ]
        t = time.perf_counter()
        pairs = list(zip(verdicts, fixes, strict=True))  # before the re-ranking below
        judged = self._rule_verdicts(fixes, version, facts, fsig)
        del fixes[MAX_FIXES:]  # the best after the rule cards had their say
        pairs = [p for p in pairs if any(p[1] is f for f in fixes)]
        repaired = repair(
            self.store, version, check, pairs, argv, pargs, catalog, attrs, facts, facts_sig=fsig
        )
        if repaired:  # no fix was clean: the clean extensions join the list
            added = [
                self._fix_out(len(fixes) + i + 1, v, argv, catalog, parsed, version, pargs)
                for i, (_, v) in enumerate(repaired)
            ]
            self._rule_verdicts(fixes + added, version, facts, fsig, judged)
            fixes = with_bases(added, [base for base, _ in repaired], fixes)
        timings["rules"] = _ms(t)
        unknowns = (
            doubt_unknowns(located, version) + _unknowns(ev, hw_name, arch, argv) + post.unknowns
        )
        no_fix = None
        if not any(f.fixes_check == "true" for f in fixes):  # undecided candidates only, or none
            no_fix = _no_fix_reason(ev, check, undecided=bool(fixes))
        references = explain_references(self.store, version, ev.attrs, catalog, printed.traces)
        result: dict[str, Any] = {
            "condition": check["condition"] or _guards_text(check),
            "rule": rule,
            "no_flag_fix": no_fix,
            "undecided": _undecided(ev),
        }
        caveats = ev.caveats + printed.notes
        conf = round(
            min(resolution.confidence, located.confidence)
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
            recommended_edit(fixes, pairs, attrs, catalog),
        )
        md += f"\n\n**The arithmetic:** {sums}" if sums else ""
        later, upgrade, differences = across.check_changes(
            self.store, version, check, base["release"]
        )
        up = upgrade_fix(
            self.store,
            version,
            check,
            later,
            argv,
            parsed.server_args,
            facts,
            prefix=_prefix(parsed),
            fired_here=ev.fired is True,
        )
        if up is not None and up.sure:
            no_fix = no_fix and upgrade_no_fix(up, no_fix)
            md = explain.upgrade_paragraph(up) + md
        md += across.release_notes(base["release"], upgrade, differences)
        citations = [location.citation] + [r.citation for r in references]
        citations += [c for ch in later for c in ch.citations if c not in citations]
        citations += [c for c in [*registered, *(up.citations if up else [])] if c not in citations]
        result_obj = TriageResult(
            **{**base, "status": "located", "confidence": conf},
            summary=explain.summary(
                exc.type,
                exc.bare,
                location,
                atoms,
                [f for f in fixes if f.fixes_check == "true"],
                version,
                upgrade=upgrade_phrase(up) if up and up.sure else None,
            ),
            explanation=md,
            location=location,
            check=CheckInfo(
                id=check["id"],
                kind=check["kind"],
                exc_type=check["exc_type"],
                bare=check["bare"],
                condition=check["condition"],
                message=check["message"],
                guards=check["guards"],
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
            model_facts=self.model_facts_for(
                parsed, model, read := {i.name for a in atoms for i in a.inputs}
            )
            + [ModelFact(**r) for r in field_rows(log_fields, read)],
        )
        if llm_enabled(self.settings):
            t = time.perf_counter()
            ctx = AssistContext(
                store=self.store,
                release=version,
                catalog=catalog,
                argv=argv,
                attrs=attrs,
                facts=facts,
                check=check,
                prefix=_prefix(parsed),
            )
            result_obj = assist(result_obj, engine_ctx=ctx, settings=self.settings)
            timings["llm"] = _ms(t)
        timings["total"] = _ms(t0)
        result_obj.timings_ms = dict(timings)
        if timings["total"] >= _SETTLE_AFTER_MS:
            freeze_long_lived()  # a cold triage built long-lived state: out of later GC passes
        return result_obj

    # -- pieces -----------------------------------------------------------------------
    def _location(self, version: str, check: dict[str, Any], located: Located) -> Location:
        start = max(1, check["start_line"] - 4)
        end = check["end_line"] + 3
        lines = self.store.file_lines(version, check["path"], start, end)
        excerpt = [
            ExcerptLine(
                line=start + i,
                text=text,
                highlight=check["start_line"] <= start + i <= check["end_line"],
            )
            for i, text in enumerate(lines)
        ]
        span = (
            f"{check['start_line']}-{check['end_line']}"
            if check["end_line"] != check["start_line"]
            else str(check["start_line"])
        )
        return Location(
            path=check["path"],
            function=check["function"],
            start_line=check["start_line"],
            end_line=check["end_line"],
            reported_line=located.reported_line,
            method=located.method,
            confidence=located.confidence,  # type: ignore[arg-type]
            citation=f"{version}:{check['path']}:{span}",
            excerpt=excerpt,
            alternatives=[f"{version}:{a['path']}:{a['start_line']}" for a in located.alternatives],
        )

    def _fix_out(
        self,
        rank: int,
        v: Verdict,
        argv: list[str],
        catalog,
        parsed: ParsedLog,  # noqa: ANN001
        version: str,
        pargs: ParsedArgs,
    ) -> FixOut:
        """The fix in the user's spellings, with its edit lines and what it gives up
        (:func:`service.engine.fixes.present.fix_out`)."""
        return fix_out(rank, v, argv, catalog, pargs, version, prefix=_prefix(parsed))

    def _rule_verdicts(
        self,
        fixes: list[FixOut],
        version: str,
        facts: dict[str, Value],
        facts_sig: str | None = None,
        judged: dict[int, bool] | None = None,
    ) -> dict[int, bool]:
        """Put the rule cards' verdicts on every fix not already in ``judged``; recommend the
        best fix that violates no error-severity card (re-ranking the clean ones first).

        Returns ``judged`` (``id`` of each fix -> violates an error card), so that a later
        call with more fixes judges only the new ones.
        """
        from service.engine.rules.checker import check_fix

        bad: dict[int, bool] = dict(judged or {})
        for f in fixes:
            if id(f) in bad:
                continue
            verdicts, violates = check_fix(self.store, version, f.argv, facts, facts_sig=facts_sig)
            f.rule_verdicts = verdicts
            bad[id(f)] = violates
            if violates:
                worst = next(
                    (v for v in verdicts if v.verdict == "violated" and v.severity == "error"), None
                )
                f.verdict += f"; violates rule {worst.rule}" if worst else "; violates a rule card"
        # statically verified fixes stay ahead of undecided candidates (replay's to decide)
        fixes.sort(key=lambda f: (f.fixes_check != "true", bad[id(f)], f.rank))
        for i, f in enumerate(fixes, start=1):
            f.rank = i
        for f in fixes:
            if not bad[id(f)] and f.fixes_check == "true" and not f.trips:
                f.recommended = True
                break
        return bad

    def _argparse(
        self,
        parsed: ParsedLog,
        argv: list[str],
        version: str,
        conf: float,
        base: dict[str, Any],
        timings: dict[str, float],
        t0: float,
    ) -> TriageResult:
        from service.engine.locate.argparse_errors import diagnose_argparse

        err = parsed.argparse_error
        assert err is not None
        diag = diagnose_argparse(err, argv or None, self.store, version)
        fixes: list[FixOut] = []
        if diag.fixed_argv is not None:
            for edit in diag.edits[:1]:
                fixes.append(
                    FixOut(
                        rank=1,
                        set={k: jsonable(v) for k, v in edit.get("set", {}).items()},
                        remove=list(edit.get("remove", [])),
                        argv=diag.fixed_argv,
                        command=render_command(diag.fixed_argv, prefix=_prefix(parsed)),
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
        timings["total"] = _ms(t0)
        return TriageResult(
            **{**base, "status": "argparse", "confidence": conf},
            later_releases=later,
            upgrade=upgrade,
            summary=" ".join(summary.split()[: explain.SUMMARY_WORDS]),
            explanation=md,
            fixes=fixes,
            citations=[cite] if cite else [],
            timings_ms=timings,
            references=[Reference(kind="help", citation=cite, text=diag.flag or "")]
            if cite
            else [],
        )

    def _no_exception(
        self, version: str, base: dict[str, Any], timings: dict[str, float], t0: float
    ) -> TriageResult:
        """The answer for a log holding a launch command but no exception or error message:
        unlocated, saying what to send (``parsed.notes`` name what was missing)."""
        timings["total"] = _ms(t0)
        unknown = UnknownFact(
            what="the failing check",
            why="the log holds a launch command but no exception, error message or argparse error",
            settle="the traceback or the error line SGLang printed before exiting",
        )
        return TriageResult(
            **{**base, "confidence": 0.0},
            summary=f"Read the launch command, but found no error to explain (SGLang {version}).",
            explanation="The log holds a launch command but no exception, error "
            "message or argparse error. Nothing is claimed about why "
            "the server stopped.",
            unknowns=[unknown],
            timings_ms=timings,
        )

    def _unlocated(
        self,
        exc,
        version: str,
        base: dict[str, Any],
        timings: dict[str, float],  # noqa: ANN001
        t0: float,
        conf: float,
        elsewhere: NotFlagProblem | None,
    ) -> TriageResult:
        timings["total"] = _ms(t0)
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


def _prefix(parsed: ParsedLog) -> str:
    ep = (parsed.entrypoint or "").strip()
    if ep.startswith("sglang serve") or ep == "sglang serve":
        return "sglang serve"
    if "launch_server" in ep:
        return ep if ep.startswith("python") else "python -m sglang.launch_server"
    return "python -m sglang.launch_server"


def _log_text(payload: str | bytes | dict[str, Any]) -> str | None:
    """The log's text, when the payload is one (for the launch scope's command search)."""
    log = payload.get("log") if isinstance(payload, dict) else payload
    return log if isinstance(log, str) else None


def _understood(parsed: ParsedLog) -> dict[str, Any]:
    return {
        "exceptions": len(parsed.exceptions),
        "command_found": parsed.command is not None,
        "release_hints": [h.version for h in parsed.release_hints],
        "python": parsed.python_version,
        "gpus": [g.name for g in parsed.gpus],
    }


def _ms(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 2)


__all__ = ["Engine", "UNKNOWN"]
