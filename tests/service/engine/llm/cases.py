"""The engine's answer to a crash log and the context the engine hands to the LLM step
(:func:`service.engine.llm.writer.assist`), for the LLM tests."""

from __future__ import annotations

from kb.catalogs import load_catalog
from service.engine.answer import TriageResult
from service.engine.evaluate.path_condition import base_attrs
from service.engine.flags.parse import parse_argv
from service.engine.llm.prompt import AssistContext, context_from_result
from service.engine.logparse.parse import parse_input
from service.engine.triage import Engine


def assist_case(
    kb,
    log: str,
    release: str,
    hardware: str | None,
) -> tuple[TriageResult, AssistContext]:
    """(the engine's result for ``log``, the context the engine would hand to ``assist``)."""
    engine = Engine(kb)
    result = engine.triage(log, release=release, hardware=hardware)
    parsed, _ = parse_input(log)
    facts, _, _ = engine.facts_for(parsed, hardware, None, None)
    catalog = load_catalog(kb.store, release)
    attrs = base_attrs(catalog, parse_argv(list(parsed.command or []), catalog), parsed.server_args)
    return result, context_from_result(kb.store, result, attrs=attrs, facts=facts)
