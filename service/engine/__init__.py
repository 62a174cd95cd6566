"""The triage engine: from a crash log to the failing check, its inputs and verified fixes.

Stages, each a sub-package owning its models, in the order a triage runs them:

``logparse``  read the log: frames, exception, argparse error, command, environment
``release``   which SGLang release raised it (frames, warnings, hints, message)
``locate``    the check that fired (frame line, function and kind, message, argparse)
``evaluate``  its path condition under the flags, the release's defaults and earlier
              writes (``chain``: validation order, call-site guards; ``symbolic``: what
              SGLang would choose)
``expr``      the three-valued interpreter those conditions run in
``facts``     hardware, model and environment facts
``flags``     the user's command line parsed with the release's catalog; edits
``fixes``     candidate fixes, re-checked against neighbouring checks; repair
``rules``     the rule-card checker and linter (derived and curated cards)
``explain``   the deterministic, cited explanation; ``llm`` an optional LLM one,
              checked in code
``answer``    the answer schema (:class:`TriageResult`)

The engine reads only :mod:`kb`; it never imports ``ingest``, a front end or
``evals`` (``pyproject.toml`` holds the import-linter contracts). Everything
outside the engine uses the names below.
"""

from __future__ import annotations

from service.engine.answer import (
    FixOut,
    FixSearch,
    InstalledRelease,
    LLMInfo,
    OnDemandNote,
    ReleaseInfo,
    RuleVerdict,
    SimilarTriage,
    TriageResult,
    UpgradeFix,
)
from service.engine.cache import clear_all as clear_caches
from service.engine.cache import stats as cache_stats
from service.engine.errors import (
    BinaryInput,
    EmptyInput,
    InputTooLarge,
    LogParseError,
    NoCrashFound,
    UnknownRelease,
)
from service.engine.evaluate.chain import (
    DISPATCHERS,
    call_site_guards,
    dispatcher_position,
    earlier_writes,
    validation_order,
)
from service.engine.evaluate.fold import apply_earlier_writes
from service.engine.evaluate.path_condition import (
    PathEvaluation,
    base_attrs,
    evaluate_path,
    prepared_pieces,
)
from service.engine.explain.deterministic import upgrade_paragraph, with_upgrade
from service.engine.explain.deterministic import with_fix as summary_with_fix
from service.engine.explain.display import (
    command_note,
    edit_lines,
    fix_search_line,
    hardware_line,
    model_facts_line,
    printed_line,
    upgrade_lines,
)
from service.engine.expr.interpreter import (
    UNKNOWN,
    Env,
    Provenance,
    Value,
    evaluate,
    fact_key,
    referenced_names,
)
from service.engine.facts.core import (
    ARCH_BY_MODEL,
    PROFILES,
    HardwareProfile,
    fact_values,
    get_profile,
    model_arch_for,
    probe_values,
    profile_from_gpus,
)
from service.engine.fixes.intent import is_feature
from service.engine.fixes.upgrade import upgrade_no_fix, upgrade_phrase
from service.engine.flags.edit import apply_edits
from service.engine.flags.parse import parse_argv
from service.engine.locate.message import MessageTemplate, message_pattern
from service.engine.logparse.environment import GpuHint
from service.engine.logparse.parse import ParsedLog, parse_input, parse_log
from service.engine.logparse.prefixes import (
    LinePrefix,
    bare_rank,
    line_prefix,
    source_column,
    strip_ansi,
)
from service.engine.logparse.redact import REDACTED, redact, redact_payload
from service.engine.release.fingerprint import warning_fits
from service.engine.release.resolve import HINT_ORDER, elsewhere_release
from service.engine.rules.lint import LintReport, lint
from service.engine.rules.payloads import LintRequest, lint_payload, rules_payload, split_command
from service.engine.settings import EngineSettings
from service.engine.triage import Engine

__all__ = [
    "ARCH_BY_MODEL", "DISPATCHERS", "HINT_ORDER", "PROFILES", "REDACTED", "UNKNOWN", "BinaryInput", "EmptyInput", "Engine",
    "EngineSettings", "Env", "FixOut", "FixSearch", "GpuHint", "InstalledRelease", "LLMInfo", "OnDemandNote",
    "ReleaseInfo", "SimilarTriage", "InputTooLarge", "LogParseError", "NoCrashFound",
    "UnknownRelease",
    "HardwareProfile", "LinePrefix", "LintReport", "LintRequest", "MessageTemplate", "ParsedLog", "PathEvaluation", "Provenance",
    "RuleVerdict", "TriageResult", "UpgradeFix", "Value", "apply_earlier_writes", "apply_edits", "bare_rank", "base_attrs",
    "cache_stats", "call_site_guards", "clear_caches", "command_note", "dispatcher_position", "earlier_writes", "edit_lines", "elsewhere_release", "evaluate",
    "evaluate_path", "fact_key", "fix_search_line", "hardware_line", "model_facts_line", "printed_line",
    "fact_values", "get_profile", "is_feature", "line_prefix", "lint", "lint_payload", "message_pattern", "model_arch_for", "parse_argv",
    "parse_input", "parse_log", "prepared_pieces", "probe_values", "profile_from_gpus", "redact", "redact_payload",
    "referenced_names",
    "rules_payload", "source_column", "split_command", "strip_ansi", "summary_with_fix", "upgrade_lines", "upgrade_no_fix", "upgrade_paragraph", "upgrade_phrase",
    "with_upgrade", "validation_order", "warning_fits",
]  # fmt: skip
