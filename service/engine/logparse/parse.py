"""Read a pasted SGLang crash log into a :class:`ParsedLog`: the entry points of log parsing.

:func:`parse_log` (text), :func:`parse_bytes` (strict UTF-8) and
:func:`parse_input` (a raw log or a structured ``{"log", "command", "release",
...}`` report) refuse inputs that are too large, empty or binary, then put
together what the readers find:

* :mod:`service.engine.logparse.text` cleans transport noise (timestamps, docker compose /
  kubectl / journald prefixes, ANSI colours, CRLF line ends);
* :mod:`service.engine.logparse.frames` finds tracebacks, chained exceptions, exception
  groups and exception lines without frames, and picks the primary exception;
* :mod:`service.engine.logparse.argparse_errors` finds the argparse error;
* :mod:`service.engine.logparse.command` finds the launch command (or a flags-only fragment);
* :mod:`service.engine.logparse.partial` reads an error message without a traceback and
  says what a partial log lacks (``ParsedLog.missing``);
* :mod:`service.engine.logparse.environment` reads ``ServerArgs(...)`` fields, environment,
  release, Python and GPU hints, and warnings printed from SGLang's files.

The parser is pure (no I/O) and tolerant of cut frames and interleaved log
lines. Every regular expression is linear-time (also the secret patterns of
:mod:`~service.engine.logparse.redact`, which see the whole text) and sees at most
:data:`~service.engine.logparse.text.SCAN_CHARS` characters of a line, so a 10 MB input
finishes in bounded time. On top of that, reading one log may spend at most
:data:`CPU_S_PER_MB` CPU seconds per MiB of its limit (``max_bytes``), checked between
the stages (:class:`~service.engine.logparse.text.CpuBudget`); past it the input is
refused as :class:`InputTooLarge` (a 413), never left running. Nothing is ever
evaluated; ``ServerArgs`` values go through :func:`ast.literal_eval` only.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from service.engine.errors import (
    BinaryInput,
    EmptyInput,
    InputTooLarge,
    LogParseError,
    NoCrashFound,
)
from service.engine.logparse.argparse_errors import ArgparseError, find_argparse_error
from service.engine.logparse.command import find_commands, model_from_argv, tokenize_command
from service.engine.logparse.environment import (
    VERSION_RE,
    GpuHint,
    ReleaseHint,
    WarningLine,
    find_env,
    find_gpus,
    find_python_version,
    find_release_hints,
    find_sglang_warnings,
    parse_server_args,
)
from service.engine.logparse.frames import ExceptionInfo, find_exceptions, pick_primary
from service.engine.logparse.partial import (
    command_lines,
    command_only,
    find_message,
    missing_parts,
)
from service.engine.logparse.redact import redact, redact_payload
from service.engine.logparse.text import CpuBudget, clean_log_marked

__all__ = [
    "CPU_S_PER_MB",
    "cpu_budget",
    "DEFAULT_MAX_BYTES",
    "ParsedLog",
    "parse_bytes",
    "parse_input",
    "parse_log",
]

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
#: CPU seconds that reading a log may take per MiB of ``max_bytes`` (at least one MiB is
#: counted). Any 1 MiB input, however adversarial, is read in about 2.5 CPU seconds.
CPU_S_PER_MB = 10.0
_BAD_CHAR_RATIO = 0.05
_STRUCTURED_KEYS = frozenset({"log", "command", "release", "hardware", "model", "python"})
_BAD_CHARS_RE = re.compile("[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd\ud800-\udfff]")


class ParsedLog(BaseModel):
    """Everything understood from one crash log."""

    exceptions: list[ExceptionInfo]
    primary: ExceptionInfo | None
    argparse_error: ArgparseError | None
    command: list[str] | None
    command_text: str | None
    entrypoint: str | None
    server_args: dict[str, object] | None
    env: dict[str, str]
    release_hints: list[ReleaseHint]
    python_version: str | None
    gpus: list[GpuHint]
    model: str | None
    notes: list[str]
    cleaned_lines: int
    warnings: list[WarningLine] = Field(default_factory=list)  # from SGLang's own files
    #: what the log lacks for a full triage (the exception line, the type, the frames...);
    #: empty for a complete traceback or an argparse error
    missing: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- entry points


def _too_large(max_bytes: int) -> InputTooLarge:
    return InputTooLarge(
        f"the input is larger than {max_bytes} bytes", details={"max_bytes": max_bytes}
    )


def _check_text(text: str, max_bytes: int) -> None:
    if len(text) > max_bytes or (
        len(text) * 4 > max_bytes and len(text.encode("utf-8", "surrogatepass")) > max_bytes
    ):
        raise _too_large(max_bytes)
    if not text.strip():
        raise EmptyInput("the log is empty")
    if "\x00" in text:
        raise BinaryInput("the input holds NUL bytes; this does not look like a text log")
    bad = len(text) - len(_BAD_CHARS_RE.sub("", text))
    if bad > _BAD_CHAR_RATIO * len(text):
        raise BinaryInput(
            f"{bad} of {len(text)} characters are control or replacement characters",
            details={"bad_chars": bad, "chars": len(text)},
        )


def cpu_budget(max_bytes: int) -> CpuBudget:
    """The CPU budget for reading one input of at most ``max_bytes`` bytes."""
    return CpuBudget(CPU_S_PER_MB * max(1.0, max_bytes / (1024 * 1024)))


def _spend(budget: CpuBudget, stage: str) -> None:
    """Raise :class:`InputTooLarge` once ``budget`` is used up (``stage`` says where)."""
    if budget.exhausted():
        raise InputTooLarge(
            f"reading the log took more than {budget.seconds:g} CPU seconds (stopped {stage}); "
            "send the part of the log around the traceback",
            details={"cpu_budget_s": budget.seconds, "stage": stage},
        )


def parse_log(
    text: str, *, max_bytes: int = DEFAULT_MAX_BYTES, budget: CpuBudget | None = None
) -> ParsedLog:
    """Parse a crash log pasted as text.

    Raises :class:`InputTooLarge` (over ``max_bytes`` UTF-8 bytes, or more CPU time
    than ``budget``, by default :func:`cpu_budget` of ``max_bytes``),
    :class:`EmptyInput` (blank), :class:`BinaryInput` (NUL bytes, or more than 5%
    control/replacement characters) and :class:`NoCrashFound` when there is no
    traceback, exception line, SGLang error message or argparse error, unless the
    log is only a launch command (:func:`~service.engine.logparse.partial.command_only`);
    its ``details["understood"]`` says what was found instead (command, release
    hints, GPUs...).

    A partial log is read as far as it goes and ``missing`` says what it lacks: an
    error message without a traceback becomes a frameless exception (see
    :func:`~service.engine.logparse.partial.find_message`), frames cut before the
    exception line an exception of type ``<unknown>``, and a log with only a launch
    command (or a flags-only fragment) has no ``primary``.
    """
    budget = budget if budget is not None else cpu_budget(max_bytes)
    _check_text(text, max_bytes)
    lines, marks, notes = clean_log_marked(text)
    _spend(budget, "after cleaning the lines")
    exceptions, traceback_notes = find_exceptions(lines, marks)
    notes.extend(traceback_notes)
    _spend(budget, "after reading tracebacks")
    argparse_error = find_argparse_error(lines)
    commands, command_notes = find_commands(lines)
    notes.extend(command_notes)
    _spend(budget, "after reading commands")
    command = commands[-1] if commands else None
    if command is not None and len(commands) > 1:
        notes.append(f"{len(commands)} launch commands found; using the last (line {command.line})")
    server_args, sa_notes = parse_server_args(lines)
    notes.extend(sa_notes)
    env = find_env(lines)
    release_hints = find_release_hints(lines)
    _spend(budget, "after reading the environment")
    if not exceptions and argparse_error is None:
        message = find_message(lines, command_lines(lines, [c.line - 1 for c in commands]))
        if message is not None:
            exceptions = [message]
            notes.append(f"line {message.start_line}: an error message without a traceback")
    paths = [f.path for e in exceptions for f in e.frames]
    model = model_from_argv(command.argv) if command else None
    if model is None and server_args and isinstance(server_args.get("model_path"), str):
        model = str(server_args["model_path"])
    primary = pick_primary(exceptions)
    parsed = ParsedLog(
        exceptions=exceptions,
        primary=primary,
        argparse_error=argparse_error,
        command=command.argv if command else None,
        command_text=command.text if command else None,
        entrypoint=command.entrypoint if command else None,
        server_args=server_args,
        env=env,
        release_hints=release_hints,
        python_version=find_python_version(paths, lines),
        gpus=find_gpus(lines),
        model=model,
        notes=notes,
        cleaned_lines=len(lines),
        warnings=find_sglang_warnings(lines),
        missing=missing_parts(primary, argparse_error is not None),
    )
    if not exceptions and argparse_error is None and (command is None or not command_only(lines)):
        raise NoCrashFound(
            "no traceback, exception line or argparse error was found in the log",
            details={"understood": _understood(parsed)},
        )
    return parsed


def _understood(parsed: ParsedLog) -> dict[str, Any]:
    keys = {
        "cleaned_lines",
        "command",
        "entrypoint",
        "model",
        "env",
        "python_version",
        "notes",
        "missing",
    }
    return parsed.model_dump(include=keys) | {
        "server_args": parsed.server_args is not None,
        "release_hints": [h.version for h in parsed.release_hints],
        "gpus": [g.name for g in parsed.gpus],
    }


def _decode(data: bytes, max_bytes: int) -> str:
    """Strict UTF-8 (a BOM is dropped); NUL bytes are refused later by :func:`parse_log`."""
    if len(data) > max_bytes:
        raise _too_large(max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BinaryInput(f"the input is not valid UTF-8 (byte {exc.start})") from exc


def parse_bytes(
    data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, budget: CpuBudget | None = None
) -> ParsedLog:
    """Decode ``data`` as strict UTF-8 (:class:`BinaryInput` otherwise) and :func:`parse_log` it."""
    return parse_log(_decode(data, max_bytes), max_bytes=max_bytes, budget=budget)


_PY_VERSION_RE = re.compile(r"(\d{1,2})\.(\d{1,3})")


def parse_input(
    payload: str | bytes | dict[str, Any],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    budget: CpuBudget | None = None,
) -> tuple[ParsedLog, dict[str, Any]]:
    """Parse a raw log or a structured report ``{"log", "command"?, "release"?, "hardware"?,
    "model"?, "python"?}`` (a dict, or a JSON object given as text or bytes).

    ``command`` replaces the command found in the log (tokenised like found
    commands: continuations joined, ``docker run``/interpreter/entrypoint
    dropped; a flags-only string is kept whole). ``release`` becomes the first
    release hint (kind ``explicit``), ``python`` the Python version (``"3.12"``),
    ``model`` the model. The second element is ``{"hardware": ..., "release": ...}``
    exactly as given (None when absent), for the engine to resolve.

    Text is redacted first (:func:`~service.engine.logparse.redact.redact`; free for text
    a front end already redacted). ``budget`` (default :func:`cpu_budget` of
    ``max_bytes``) covers the redaction and the parse.
    """
    budget = budget if budget is not None else cpu_budget(max_bytes)
    if isinstance(payload, bytes):
        payload = _decode(payload, max_bytes)
    if isinstance(payload, str):
        if len(payload) > max_bytes:
            raise _too_large(max_bytes)
        payload = redact(payload)
        _spend(budget, "after redacting secrets")
        data: object = None
        if payload.lstrip().startswith("{"):
            try:
                data = json.loads(payload)
            except (ValueError, RecursionError):
                data = None
        if not (isinstance(data, dict) and "log" in data):
            return (
                parse_log(payload, max_bytes=max_bytes, budget=budget),
                {"hardware": None, "release": None},
            )
        payload = data
    if not isinstance(payload, dict):
        raise LogParseError(f"unsupported input of type {type(payload).__name__}")
    redacted: dict[str, Any] = redact_payload(payload)
    _spend(budget, "after redacting secrets")
    return _parse_structured(redacted, max_bytes, budget)


def _parse_structured(
    payload: dict[str, Any], max_bytes: int, budget: CpuBudget
) -> tuple[ParsedLog, dict[str, Any]]:
    log = payload.get("log")
    if isinstance(log, list) and all(isinstance(x, str) for x in log):
        log = "\n".join(log)
    if not isinstance(log, str):
        raise EmptyInput("structured input needs a 'log' string")
    parsed = parse_log(log, max_bytes=max_bytes, budget=budget)
    update: dict[str, Any] = {}
    notes = list(parsed.notes)
    extra = sorted(str(k) for k in payload if k not in _STRUCTURED_KEYS)
    if extra:
        notes.append(f"ignored input field(s): {', '.join(extra)}")
    command = payload.get("command")
    if isinstance(command, str) and command.strip() or isinstance(command, list) and command:
        found = tokenize_command(command)
        update |= {
            "command": found.argv,
            "command_text": found.text,
            "entrypoint": found.entrypoint,
            "model": model_from_argv(found.argv) or parsed.model,
        }
    release = payload.get("release")
    if isinstance(release, (str, int, float)) and str(release).strip():
        m = VERSION_RE.search(str(release))
        version = m[0].rstrip(".") if m else str(release).strip()
        hint = ReleaseHint(version=version, evidence=f"release given: {release}", kind="explicit")
        update["release_hints"] = [hint, *parsed.release_hints]
    python = payload.get("python")
    if isinstance(python, (str, int, float)) and str(python).strip():
        m = _PY_VERSION_RE.search(str(python))
        update["python_version"] = f"{m[1]}.{m[2]}" if m else str(python).strip()
    model = payload.get("model")
    if isinstance(model, str) and model.strip():
        update["model"] = model.strip()
    update["notes"] = notes
    extras = {"hardware": payload.get("hardware"), "release": payload.get("release")}
    return parsed.model_copy(update=update), extras
