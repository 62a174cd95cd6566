"""The :class:`Engine`: the KB handle and settings, and :meth:`Engine.triage`, the stages
of a triage in order, each a call returning what the next one reads."""

from __future__ import annotations

import time
from typing import Any

from kb.knowledge import KnowledgeBase
from service.engine.answer import HardwareSource, ModelFact, TriageResult
from service.engine.cache import freeze_long_lived, tune_gc
from service.engine.errors import NoCrashFound
from service.engine.expr.interpreter import Value
from service.engine.facts.core import HardwareProfile
from service.engine.llm.prompt import AssistContext
from service.engine.llm.writer import assist
from service.engine.llm.writer import enabled as llm_enabled
from service.engine.logparse.parse import ParsedLog
from service.engine.settings import EngineSettings
from service.engine.triage.argparse_answer import argparse_answer
from service.engine.triage.assemble import located_answer
from service.engine.triage.fix_list import list_fixes
from service.engine.triage.inputs import (
    TriageInput,
    checkpoint_notes,
    command_prefix,
    facts_for,
    hardware_for,
    model_facts_for,
    ms,
    read_input,
    understood,
)
from service.engine.triage.located import Evaluated, evaluate_located, locate
from service.engine.triage.unlocated import no_exception_answer, unlocated_answer

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
        tune_gc()

    # -- facts (see service.engine.triage.inputs) --------------------------------------
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
        return facts_for(parsed, hardware, model, model_arch, found)

    @staticmethod
    def hardware_for(
        parsed: ParsedLog, hardware: str | None
    ) -> tuple[HardwareProfile | None, HardwareSource | None]:
        """The hardware profile of a triage and its source: the declared ``hardware``
        always wins; without it, the closest profile to the GPUs the log printed
        (:func:`~service.engine.facts.from_log.hardware_from_log`); else none."""
        return hardware_for(parsed, hardware)

    def model_facts_for(
        self, parsed: ParsedLog, model: str | None, read: set[str] | None = None
    ) -> list[ModelFact]:
        """The checkpoint facts :meth:`facts_for` supplied, as ``TriageResult.model_facts``;
        ``used`` marks those whose evaluator keys are in ``read`` (the keys the evaluated
        condition looked up)."""
        return model_facts_for(parsed, model, read)

    @staticmethod
    def checkpoint_notes(parsed: ParsedLog, model: str | None) -> list[str]:
        """Why the checkpoint's ``config.json`` was skipped (too big, not JSON), if it was."""
        return checkpoint_notes(parsed, model)

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
        inp = read_input(
            self.store,
            payload,
            release=release,
            hardware=hardware,
            model=model,
            model_arch=model_arch,
            max_bytes=max_bytes,
            parsed_input=parsed_input,
            timings=timings,
            t0=t0,
        )
        parsed = inp.parsed
        if parsed.argparse_error is not None:
            return argparse_answer(self.store, inp, timings, t0)
        exc = parsed.primary
        if exc is None:
            if parsed.command is None:
                raise NoCrashFound(
                    "no exception to triage", details={"understood": understood(parsed)}
                )
            return no_exception_answer(inp, timings, t0)
        located, elsewhere = locate(self.kb, inp, exc, timings)
        if located is None:
            return unlocated_answer(inp, exc, elsewhere, timings, t0)
        evaluated = evaluate_located(self.store, inp, exc, located, timings)
        listed = list_fixes(inp, exc, evaluated, timings)
        result = located_answer(self.store, inp, exc, located, evaluated, listed, timings)
        return self._finish(result, inp, evaluated, timings, t0)

    def _finish(
        self,
        result: TriageResult,
        inp: TriageInput,
        evaluated: Evaluated,
        timings: dict[str, float],
        t0: float,
    ) -> TriageResult:
        """The located answer, rewritten by the optional LLM step (when configured), with
        its total time; a slow triage freezes the long-lived state it built."""
        if llm_enabled(self.settings):
            t = time.perf_counter()
            ctx = AssistContext.of(evaluated.ctx, prefix=command_prefix(inp.parsed))
            result = assist(result, engine_ctx=ctx, settings=self.settings)
            timings["llm"] = ms(t)
        timings["total"] = ms(t0)
        result.timings_ms = dict(timings)
        if timings["total"] >= _SETTLE_AFTER_MS:
            freeze_long_lived()  # a cold triage built long-lived state: out of later GC passes
        return result
