"""What every answer of a triage is built from: the parsed log, the release it is read
against, the hardware, model and log facts, the release's catalog and the command parsed
with it, and the answer's fields common to every status (:class:`TriageInput`).

:func:`read_input` is the triage's first stage; the facts helpers below are also
:class:`~service.engine.triage.engine.Engine`'s methods of the same names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kb.catalog_types import Catalog
from kb.catalogs import load_catalog
from kb.store import Store
from service.engine.answer import HardwareSource, ModelFact, ParsedSummary, jsonable
from service.engine.errors import UnknownRelease
from service.engine.expr.interpreter import Provenance, Value, fact_key
from service.engine.facts.checkpoint import checkpoint_facts, checkpoint_info, fact_rows, flag_value
from service.engine.facts.core import HardwareProfile, fact_values, get_profile, model_arch_for
from service.engine.facts.from_log import (
    LogModelField,
    hardware_from_log,
    log_lines,
    log_model_facts,
    model_fields_from_log,
)
from service.engine.flags.parse import ParsedArgs, parse_argv
from service.engine.locate.localize import Located
from service.engine.locate.scope import Scope, launch_scope
from service.engine.logparse.parse import ParsedLog, parse_input
from service.engine.release.consistency import recheck_release
from service.engine.release.resolve import ReleaseResolution, resolve_release
from service.engine.release.versions import parse_version


@dataclass
class TriageInput:
    """The log read, its release resolved and its facts gathered: what the answers use.

    ``base`` holds the :class:`~service.engine.answer.TriageResult` fields every status
    shares (status ``unlocated`` and confidence 0 until an answer says otherwise)."""

    parsed: ParsedLog
    resolution: ReleaseResolution
    version: str
    #: the check the release's consistency step located already, if it did
    rechecked: Located | None
    catalog: Catalog
    argv: list[str]
    pargs: ParsedArgs
    facts: dict[str, Value]
    hw_name: str | None
    arch: str | None
    model: str | None
    #: the model fields SGLang printed in the log
    log_fields: list[LogModelField]
    scope: Scope
    base: dict[str, Any]


def read_input(
    store: Store,
    payload: str | bytes | dict[str, Any],
    *,
    release: str | None,
    hardware: str | None,
    model: str | None,
    model_arch: str | None,
    max_bytes: int,
    parsed_input: tuple[ParsedLog, dict[str, Any]] | None,
    timings: dict[str, float],
    t0: float,
) -> TriageInput:
    """Parse ``payload`` (unless ``parsed_input`` holds it parsed), resolve its release,
    gather its facts and parse its command with the release's catalog; timings ``parse``
    and ``resolve`` are recorded in ``timings``.

    Raises :class:`UnknownRelease` for a release that is no version, an empty KB, or a log no
    ingested release matches."""
    if parsed_input is None:
        parsed_input = parse_input(payload, max_bytes=max_bytes)
    parsed, extras = parsed_input
    timings["parse"] = ms(t0)
    release = release or extras.get("release")
    if release is not None and parse_version(str(release)) is None:
        raise UnknownRelease(
            f"{str(release)[:100]!r} is not an SGLang version (say 0.5.11)",
            details={"release": str(release)[:100]},
        )
    hardware = hardware or extras.get("hardware")
    model = model or (extras.get("model") if isinstance(extras.get("model"), str) else None)
    if not store.releases():
        raise UnknownRelease("the KB holds no releases; run `sglang-triage ingest --defaults`")
    t = time.perf_counter()
    resolution = resolve_release(parsed, store, explicit=release)
    timings["resolve"] = ms(t)
    if resolution.release is None:
        raise UnknownRelease(
            "no ingested release matches this log",
            details={"understood": understood(parsed), **resolution.model_dump()},
        )
    found = hardware_for(parsed, hardware)
    facts, hw_name, arch = facts_for(parsed, hardware, model, model_arch, found)
    log_fields = model_fields_from_log(log_lines(payload, max_bytes))  # what SGLang printed
    facts.update(log_model_facts(log_fields))
    scope = launch_scope(parsed, model=model, model_arch=arch, text=log_text(payload))
    recheck = recheck_release(store, parsed, resolution, facts, scope)  # consistency
    resolution, version = recheck.resolution, str(recheck.resolution.release)
    catalog = load_catalog(store, version)
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
        + checkpoint_notes(parsed, model),
    )
    base = dict(
        status="unlocated",
        release=resolution.model_dump(),
        parsed=summary_parsed,
        confidence=0.0,
        hardware=found[1],
    )
    return TriageInput(
        parsed=parsed,
        resolution=resolution,
        version=version,
        rechecked=recheck.located,
        catalog=catalog,
        argv=argv,
        pargs=pargs,
        facts=facts,
        hw_name=hw_name,
        arch=arch,
        model=model,
        log_fields=log_fields,
        scope=scope,
        base=base,
    )


# -- facts ------------------------------------------------------------------------------
def facts_for(
    parsed: ParsedLog,
    hardware: str | None,
    model: str | None,
    model_arch: str | None,
    found: tuple[HardwareProfile | None, HardwareSource | None] | None = None,
) -> tuple[dict[str, Value], str | None, str | None]:
    """(facts, hardware profile name, architecture) of a triage; ``found`` is
    :func:`hardware_for`'s answer when the caller has it already."""
    hw, source = found if found is not None else hardware_for(parsed, hardware)
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
    parsed: ParsedLog, model: str | None, read: set[str] | None = None
) -> list[ModelFact]:
    """The checkpoint facts :func:`facts_for` supplied, as ``TriageResult.model_facts``;
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


def checkpoint_notes(parsed: ParsedLog, model: str | None) -> list[str]:
    """Why the checkpoint's ``config.json`` was skipped (too big, not JSON), if it was."""
    ckpt = checkpoint_info(model or parsed.model)
    return list(ckpt.notes[:3]) if ckpt is not None else []


# -- small helpers ----------------------------------------------------------------------
def command_prefix(parsed: ParsedLog) -> str:
    """How the log launched SGLang (``sglang serve`` or ``python -m
    sglang.launch_server``), for the fixed commands an answer prints."""
    ep = (parsed.entrypoint or "").strip()
    if ep.startswith("sglang serve") or ep == "sglang serve":
        return "sglang serve"
    if "launch_server" in ep:
        return ep if ep.startswith("python") else "python -m sglang.launch_server"
    return "python -m sglang.launch_server"


def log_text(payload: str | bytes | dict[str, Any]) -> str | None:
    """The log's text, when the payload is one (for the launch scope's command search)."""
    log = payload.get("log") if isinstance(payload, dict) else payload
    return log if isinstance(log, str) else None


def understood(parsed: ParsedLog) -> dict[str, Any]:
    """What was read from a log no answer could be given for (an error's ``details``)."""
    return {
        "exceptions": len(parsed.exceptions),
        "command_found": parsed.command is not None,
        "release_hints": [h.version for h in parsed.release_hints],
        "python": parsed.python_version,
        "gpus": [g.name for g in parsed.gpus],
    }


def ms(t: float) -> float:
    """Milliseconds since ``t`` (a :func:`time.perf_counter` reading), to 0.01 ms."""
    return round((time.perf_counter() - t) * 1000, 2)
