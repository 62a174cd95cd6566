"""Read a pasted SGLang crash log: tracebacks, argparse errors, the launch command and hints.

The parser is pure (no I/O) and tolerant: logs arrive with timestamps, docker
compose / kubectl / journald prefixes, ANSI colours, CRLF line ends, cut
frames and interleaved log lines. :func:`clean_log` removes the transport
noise, then a single pass over the lines finds Python tracebacks (with or
without their ``Traceback (most recent call last):`` header), chained
exceptions, exception groups and exception lines without frames. The helpers
in :mod:`sglang_triage.service.logparse_command` find the argparse error, the
launch command, ``ServerArgs(...)`` fields, environment, release and GPU hints.

Every regular expression is linear-time (no overlapping nested quantifiers)
and sees at most :data:`SCAN_CHARS` characters of a line, so a 10 MB input
finishes in bounded time. Nothing is ever evaluated; ``ServerArgs`` values go
through :func:`ast.literal_eval` only.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from sglang_triage.errors import (
    BinaryInput,
    EmptyInput,
    InputTooLarge,
    LogParseError,
    NoCrashFound,
)
from sglang_triage.service.logparse_command import (
    SCAN_CHARS,
    VERSION_RE,
    ArgparseError,
    GpuHint,
    ReleaseHint,
    find_argparse_error,
    find_commands,
    find_env,
    find_gpus,
    find_release_hints,
    model_from_argv,
    parse_server_args,
    tokenize_command,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ArgparseError",
    "ExceptionInfo",
    "Frame",
    "GpuHint",
    "ParsedLog",
    "ReleaseHint",
    "clean_log",
    "package_path",
    "parse_bytes",
    "parse_input",
    "parse_log",
]

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
MAX_LINE_CHARS = 100_000  # longer lines are cut (a ServerArgs repr can be ~15k characters)
MAX_EXCEPTIONS = 1000  # only the last ones are kept
UNKNOWN_TYPE = "<unknown>"  # type of a traceback whose exception line is missing
_BAD_CHAR_RATIO = 0.05
_MAX_MESSAGE_LINES = 50
_MAX_SOURCE_LINES = 20
_MAX_NOTES = 20
_STRUCTURED_KEYS = frozenset({"log", "command", "release", "hardware", "model", "python"})


class Frame(BaseModel):
    """One ``File "...", line N, in f`` entry of a traceback."""

    path: str
    line: int | None
    function: str | None
    source: str | None
    package_path: str | None
    elided_before: bool


class ExceptionInfo(BaseModel):
    """An exception: its frames (outermost first) and its message."""

    type: str
    qualified_type: str
    message: str | None
    bare: bool
    frames: list[Frame]
    context: str | None
    start_line: int


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


# --------------------------------------------------------------------------- cleaning

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]{0,64}[ -/]{0,16}[@-~]|\x1b\][^\x07\x1b\n]{0,4096}(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?"
)
_BRACKET_TS_RE = re.compile(r"\[\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}[^\]\n]{0,80}\] ?")
_ISO_TS_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})? ?"
)
_JOURNALD_RE = re.compile(
    r"[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} [^\s:]{1,255} [^\s:\[]{1,255}(?:\[\d{1,10}\])?: ?"
)
_KUBECTL_RE = re.compile(r"\[pod/[^\]\s]{1,512}\] ?")
_COMPOSE_RE = re.compile(r"([A-Za-z0-9][\w.-]{0,63}) {0,40}\|(?: |$)")
_BAD_CHARS_RE = re.compile("[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd\ud800-\udfff]")


def _compose_services(lines: Sequence[str]) -> frozenset[str]:
    """docker compose service prefixes (``svc-1  | ``) that are consistent enough to strip.

    A name counts when it prefixes at least two lines and compose-style lines make
    up at least 30% of the non-blank lines, so ``a | b`` in prose is left alone.
    """
    counts: Counter[str] = Counter()
    nonblank = 0
    for line in lines:
        if line.strip():
            nonblank += 1
            m = _COMPOSE_RE.match(line, 0, 200) if "|" in line else None
            if m is not None:
                counts[m[1]] += 1
    if sum(counts.values()) < max(2, 0.3 * nonblank):
        return frozenset()
    return frozenset(name for name, c in counts.items() if c >= 2)


def _strip_prefix(line: str, compose: frozenset[str]) -> tuple[str, bool, str | None]:
    """Remove transport prefixes from one line.

    Returns the rest, whether an SGLang ``[timestamp]`` was removed, and the compose
    service. Exactly one space after a prefix is removed, so indentation survives.
    """
    marked = False
    service = None
    if line[:1] in ("", " ", "\t"):
        return line, marked, service  # no prefix starts with blank space
    for _ in range(6):
        m = _KUBECTL_RE.match(line) or _JOURNALD_RE.match(line) or _ISO_TS_RE.match(line)
        if m is None:
            m = _BRACKET_TS_RE.match(line)
            marked = marked or m is not None
        if m is None and compose:
            c = _COMPOSE_RE.match(line, 0, 200)
            m = c if c is not None and c[1] in compose else None
            service = m[1] if m is not None else service
        if m is None:
            break
        line = line[m.end() :]
    return line, marked, service


def _clean(text: str) -> tuple[list[str], list[bool], list[str]]:
    """Cleaned lines, per-line marks and notes.

    A line is marked when it starts a new log record: it carried an SGLang
    ``[timestamp]`` or comes from another compose service than the line before.
    """
    notes: list[str] = []
    text = text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    text = _ANSI_RE.sub("", text)
    raw = text.split("\n")
    if raw and not raw[-1]:
        raw.pop()
    long_lines = sum(1 for line in raw if len(line) > MAX_LINE_CHARS)
    if long_lines:
        notes.append(f"{long_lines} line(s) longer than {MAX_LINE_CHARS} characters were cut")
    compose = _compose_services(raw)
    lines: list[str] = []
    marks: list[bool] = []
    previous = None
    for line in raw:
        cleaned, marked, service = _strip_prefix(line[:MAX_LINE_CHARS], compose)
        lines.append(cleaned.rstrip())
        marks.append(marked or (service is not None and service != previous))
        previous = service or previous
    return lines, marks, notes


def clean_log(text: str) -> list[str]:
    """The log as lines without ANSI escapes, CR line ends or per-line prefixes.

    Removed prefixes: ``[2026-03-23 14:01:38 TP0] `` and other bracketed
    timestamps, ISO timestamps (``2026-03-23T14:01:38.123Z ``), kubectl
    ``[pod/name/container] ``, journald ``Mar 23 14:01:38 host python[1234]: ``
    and docker compose ``svc-1  | `` (only for service names that prefix the log
    consistently). Indentation after a prefix is kept; trailing blanks are not.
    """
    return _clean(text)[0]


# --------------------------------------------------------------------------- tracebacks

_HEADER = "Traceback (most recent call last)"
_CAUSE = "The above exception was the direct cause of the following exception"
_CONTEXT = "During handling of the above exception, another exception occurred"
_FRAME_RE = re.compile(r'([ \t]*)File "([^"\n]{1,4096})", line (\d{1,9})(.*)')
_LOGLINE_RE = re.compile(
    r"(?:- )?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b|[IWEF]\d{4} \d\d:\d\d:\d\d"
    r"|\S{1,300}\.py:\d{1,7}: "
)
_GROUP_RE = re.compile(r"([ \t]*)\| ?")
_STRICT_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt")
_LENIENT_SUFFIXES = (*_STRICT_SUFFIXES, "Iteration", "Warning", "Failure", "Fault", "Timeout")
_PY_PATH_MARKERS = ("/site-packages/", "/dist-packages/", "/python/")


def package_path(path: str) -> str | None:
    """``sglang/...`` part of a frame path, or None when the file is not inside SGLang.

    Installed (``.../site-packages/sglang/srt/x.py``), elided (``.../sglang/srt/x.py``)
    and checkout (``/sgl-workspace/sglang/python/sglang/launch_server.py``) paths
    are understood; the package directory is the ``sglang`` right after
    ``site-packages/``/``dist-packages/``/``python/``, else the last ``sglang/`` segment.
    """
    p = path.replace("\\", "/")
    for marker in _PY_PATH_MARKERS:
        k = p.rfind(marker + "sglang/")
        if k >= 0:
            rest = p[k + len(marker) :]
            return rest if len(rest) > len("sglang/") else None
    k = p.rfind("/sglang/")
    start = k + 1 if k >= 0 else (0 if p.startswith("sglang/") else -1)
    if start < 0 or len(p) - start <= len("sglang/"):
        return None
    return p[start:]


def _exc_name(stripped: str, strict: bool) -> tuple[str, str | None] | None:
    """``(qualified name, text after the colon or None)`` if the line is an exception line.

    ``strict`` (for lines outside a traceback) wants a name ending in Error,
    Exception, Exit or Interrupt; right after frames any CamelCase or dotted name
    with a message, or a name with a usual suffix, is accepted. ALL-CAPS names
    (log levels such as ``WARNING:``) never are.
    """
    name, colon, rest = stripped.partition(":")
    if not name or len(name) > 300 or not name.isascii():
        return None
    parts = name.split(".")
    last = parts[-1]
    if not all(p.isidentifier() for p in parts) or not last[0].isupper() or last.isupper():
        return None
    msg = rest if colon else None
    if strict:
        ok = (last.endswith(_STRICT_SUFFIXES) and last != "Error") or last == "StopIteration"
    else:
        ok = msg is not None or "." in name or last.endswith(_LENIENT_SUFFIXES)
    return (name, msg) if ok else None


def _is_elision(s: str) -> bool:
    return s in ("...", "…", "(...)") or s.startswith(
        ("[...", "[…", "[ ...", "[Previous line repeated", "... ", "…")
    )


def _caret_only(s: str) -> bool:
    return bool(s) and not s.strip("^~ ")


@dataclass
class _Tb:
    """A traceback being read; ``pending`` is the last frame, built once its source is known."""

    start: int
    max_exc_indent: int
    context: str | None
    frames: list[Frame] = field(default_factory=list)
    pending: tuple[str, int, str | None, bool] | None = None
    source: list[str] = field(default_factory=list)
    frame_indent: int = 0
    elided: bool = False
    blanks: int = 0
    strays: int = 0

    def close_frame(self) -> None:
        """Turn the pending frame and the source lines under it into a :class:`Frame`."""
        if self.pending is not None:
            path, line, func, elided = self.pending
            self.frames.append(
                Frame(
                    path=path,
                    line=line,
                    function=func,
                    source="\n".join(self.source) if self.source else None,
                    package_path=package_path(path),
                    elided_before=elided,
                )
            )
        self.pending = None
        self.source = []


class _Scanner:
    """One pass over the cleaned lines collecting exceptions (see :func:`parse_log`).

    Exceptions are kept as keyword dicts and only the last :data:`MAX_EXCEPTIONS`
    become models, so a log made of nothing but exception lines stays cheap.
    """

    def __init__(self, lines: Sequence[str], marks: Sequence[bool]) -> None:
        self.lines = lines
        self.marks = marks
        self.found: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.dropped_notes = 0
        self.total = 0
        self.tb: _Tb | None = None
        self.context: str | None = None
        self.context_until = -1

    def _note(self, text: str) -> None:
        if len(self.notes) < _MAX_NOTES:
            self.notes.append(text)
        else:
            self.dropped_notes += 1

    def _take_context(self, i: int) -> str | None:
        ctx = self.context if i <= self.context_until else None
        self.context = None
        return ctx

    def _flush(self) -> None:
        """End the open traceback that never reached an exception line."""
        tb, self.tb = self.tb, None
        if tb is None:
            return
        tb.close_frame()
        if not tb.frames:
            self._note(f"line {tb.start + 1}: a traceback header with no frames was skipped")
            return
        self._note(f"line {tb.start + 1}: the traceback ends without an exception line")
        self._record(
            {
                "type": UNKNOWN_TYPE,
                "qualified_type": UNKNOWN_TYPE,
                "message": None,
                "bare": True,
                "frames": tb.frames,
                "context": tb.context,
                "start_line": tb.start + 1,
            }
        )

    def _ends_message(self, j: int) -> bool:
        """True when line ``j`` cannot continue an exception message."""
        line = self.lines[j][:SCAN_CHARS]
        s = line.strip()
        return (
            not s
            or self.marks[j]
            or _HEADER in line
            or s.startswith((_CAUSE, _CONTEXT, "usage: ", "+-"))
            or _is_elision(s)
            or _FRAME_RE.match(line) is not None
            or _LOGLINE_RE.match(s) is not None
            or ": error: " in line
            or s.startswith("error: ")
            or (line == s and _exc_name(s, strict=True) is not None)
        )

    def _exception(self, i: int, name: str, first: str | None, tb: _Tb | None) -> int:
        """Record the exception on line ``i`` with its message; returns the next line index.

        A message continues on the following lines until a blank line, a log record,
        a traceback, frame or exception line, or :data:`_MAX_MESSAGE_LINES` lines.
        """
        j = i + 1
        message = None
        if first is not None:
            parts = [first[1:] if first.startswith(" ") else first]
            while j < len(self.lines) and j - i <= _MAX_MESSAGE_LINES and not self._ends_message(j):
                parts.append(self.lines[j][:SCAN_CHARS])
                j += 1
            message = "\n".join(parts).strip() or None
        if tb is not None and tb.elided:
            self._note(f"line {i + 1}: frames were cut just before the exception line")
        self._record(
            {
                "type": name.rsplit(".", 1)[-1],
                "qualified_type": name,
                "message": message,
                "bare": message is None,
                "frames": tb.frames if tb else [],
                "context": tb.context if tb else self._take_context(i),
                "start_line": (tb.start if tb else i) + 1,
            }
        )
        return j

    def _record(self, kwargs: dict[str, Any]) -> None:
        self.total += 1
        self.found.append(kwargs)
        if len(self.found) > 2 * MAX_EXCEPTIONS:
            del self.found[:-MAX_EXCEPTIONS]

    def _frame(self, i: int, m: re.Match[str]) -> None:
        if self.tb is None:
            self._note(
                f"line {i + 1}: frames without a 'Traceback (most recent call last):' header"
            )
            indent = len(m[1])
            self.tb = _Tb(i, indent - 1, self._take_context(i))
        tb = self.tb
        tb.close_frame()
        if not tb.frames:
            tb.frame_indent = len(m[1])
        tail = m[4].strip()
        func = (tail[len(", in ") :].strip() or None) if tail.startswith(", in ") else None
        tb.pending = (m[2], int(m[3]), func, tb.elided)
        tb.elided = False
        tb.blanks = tb.strays = 0

    def run(self) -> list[ExceptionInfo]:
        """Scan every line; returns the exceptions found (the last :data:`MAX_EXCEPTIONS`)."""
        lines, n = self.lines, len(self.lines)
        i = 0
        while i < n:
            line = lines[i][:SCAN_CHARS]
            group = _GROUP_RE.match(line, 0, 80) if "|" in line[:80] else None
            if group is not None:  # "  | " margin of an exception group member
                line = group[1] + line[group.end() :]
            s = line.strip()
            indent = len(line) - len(line.lstrip())
            m = _FRAME_RE.match(line) if "File" in line else None
            if m is not None:
                self._frame(i, m)
            elif _HEADER in line:
                self._flush()
                self.tb = _Tb(i, indent, self._take_context(i))
            elif s.startswith((_CAUSE, _CONTEXT)):
                self._flush()
                self.context = "cause" if s.startswith(_CAUSE) else "context"
                self.context_until = i + 4
            elif self.tb is not None:
                i = self._in_traceback(i, s, indent)
                continue
            elif indent == 0 and (exc := _exc_name(s, strict=True)) is not None:
                i = self._exception(i, exc[0], exc[1], None)
                continue
            i += 1
        self._flush()
        if self.dropped_notes:
            self.notes.append(f"{self.dropped_notes} more notes like these were left out")
        if self.total > MAX_EXCEPTIONS:
            self.notes.append(f"{self.total} exceptions found; only the last {MAX_EXCEPTIONS} kept")
        return [ExceptionInfo(**kw) for kw in self.found[-MAX_EXCEPTIONS:]]

    def _in_traceback(self, i: int, s: str, indent: int) -> int:
        """Handle a non-frame line while a traceback is open; returns the next index."""
        tb = self.tb
        assert tb is not None
        if not s:
            tb.blanks += 1
            if tb.blanks > 2:
                self._flush()
            return i + 1
        if _is_elision(s):
            tb.elided = True
            return i + 1
        if s.startswith("+-"):  # "+-+---- 1 ----" separators of exception groups
            return i + 1
        if tb.pending is not None and indent > tb.frame_indent and not tb.blanks:
            if not _caret_only(s) and len(tb.source) < _MAX_SOURCE_LINES:
                tb.source.append(s)
            return i + 1
        exc = _exc_name(s, strict=False) if indent <= max(tb.max_exc_indent, 0) else None
        if exc is not None:
            tb.close_frame()
            self.tb = None
            return self._exception(i, exc[0], exc[1], tb)
        tb.strays += 1
        if self.marks[i] or _LOGLINE_RE.match(s):
            if tb.strays > 50:
                self._flush()
            return i + 1
        if tb.strays > 3:
            self._flush()
            return i  # look at this line again, outside the traceback
        return i + 1


_PY_PATH_RE = re.compile(r"python(3\.\d{1,2})/")
_PY_TEXT_RE = re.compile(r"\bPython:?[ \t]{1,3}v?(3\.\d{1,2})(?:\.\d{1,3})?\b")


def find_python_version(paths: Sequence[str], lines: Sequence[str]) -> str | None:
    """``"3.12"`` from frame paths (``lib/python3.12/``) first, else from ``Python 3.12.3`` text."""
    for path in paths:
        m = _PY_PATH_RE.search(path[:SCAN_CHARS])
        if m is not None:
            return m[1]
    for raw in lines:
        if "ython" not in raw:
            continue
        m = _PY_TEXT_RE.search(raw[:SCAN_CHARS]) or _PY_PATH_RE.search(raw[:SCAN_CHARS])
        if m is not None:
            return m[1]
    return None


def _pick_primary(excs: Sequence[ExceptionInfo]) -> ExceptionInfo | None:
    """The last exception whose innermost frame is inside sglang, else the last exception.

    Exceptions whose exception line is missing come after real ones in both tiers.
    """
    real = [e for e in excs if e.type != UNKNOWN_TYPE]
    for pool in (real, excs):
        for exc in reversed(pool):
            if exc.frames and exc.frames[-1].package_path:
                return exc
    pool = real or list(excs)
    return pool[-1] if pool else None


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


def parse_log(text: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ParsedLog:
    """Parse a crash log pasted as text.

    Raises :class:`InputTooLarge` (over ``max_bytes`` UTF-8 bytes),
    :class:`EmptyInput` (blank), :class:`BinaryInput` (NUL bytes, or more than 5%
    control/replacement characters) and :class:`NoCrashFound` when there is no
    traceback, exception line or argparse error; its ``details["understood"]``
    says what was found instead (command, release hints, GPUs...).
    """
    _check_text(text, max_bytes)
    lines, marks, notes = _clean(text)
    scanner = _Scanner(lines, marks)
    exceptions = scanner.run()
    notes.extend(scanner.notes)
    argparse_error = find_argparse_error(lines)
    commands, command_notes = find_commands(lines)
    notes.extend(command_notes)
    command = commands[-1] if commands else None
    if command is not None and len(commands) > 1:
        notes.append(f"{len(commands)} launch commands found; using the last (line {command.line})")
    server_args, sa_notes = parse_server_args(lines)
    notes.extend(sa_notes)
    paths = [f.path for e in exceptions for f in e.frames]
    model = model_from_argv(command.argv) if command else None
    if model is None and server_args and isinstance(server_args.get("model_path"), str):
        model = str(server_args["model_path"])
    parsed = ParsedLog(
        exceptions=exceptions,
        primary=_pick_primary(exceptions),
        argparse_error=argparse_error,
        command=command.argv if command else None,
        command_text=command.text if command else None,
        entrypoint=command.entrypoint if command else None,
        server_args=server_args,
        env=find_env(lines),
        release_hints=find_release_hints(lines),
        python_version=find_python_version(paths, lines),
        gpus=find_gpus(lines),
        model=model,
        notes=notes,
        cleaned_lines=len(lines),
    )
    if not exceptions and argparse_error is None:
        raise NoCrashFound(
            "no traceback, exception line or argparse error was found in the log",
            details={"understood": _understood(parsed)},
        )
    return parsed


def _understood(parsed: ParsedLog) -> dict[str, Any]:
    keys = {"cleaned_lines", "command", "entrypoint", "model", "env", "python_version", "notes"}
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


def parse_bytes(data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ParsedLog:
    """Decode ``data`` as strict UTF-8 (:class:`BinaryInput` otherwise) and :func:`parse_log` it."""
    return parse_log(_decode(data, max_bytes), max_bytes=max_bytes)


_PY_VERSION_RE = re.compile(r"(\d{1,2})\.(\d{1,3})")


def parse_input(
    payload: str | bytes | dict[str, Any], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[ParsedLog, dict[str, Any]]:
    """Parse a raw log or a structured report ``{"log", "command"?, "release"?, "hardware"?,
    "model"?, "python"?}`` (a dict, or a JSON object given as text or bytes).

    ``command`` replaces the command found in the log (tokenised like found
    commands: continuations joined, ``docker run``/interpreter/entrypoint
    dropped; a flags-only string is kept whole). ``release`` becomes the first
    release hint (kind ``explicit``), ``python`` the Python version (``"3.12"``),
    ``model`` the model. The second element is ``{"hardware": ..., "release": ...}``
    exactly as given (None when absent), for the engine to resolve.
    """
    if isinstance(payload, bytes):
        payload = _decode(payload, max_bytes)
    if isinstance(payload, str):
        data: object = None
        if payload.lstrip().startswith("{"):
            if len(payload) > max_bytes:
                raise _too_large(max_bytes)
            try:
                data = json.loads(payload)
            except (ValueError, RecursionError):
                data = None
        if not (isinstance(data, dict) and "log" in data):
            return parse_log(payload, max_bytes=max_bytes), {"hardware": None, "release": None}
        payload = data
    if not isinstance(payload, dict):
        raise LogParseError(f"unsupported input of type {type(payload).__name__}")
    return _parse_structured(payload, max_bytes)


def _parse_structured(payload: dict[str, Any], max_bytes: int) -> tuple[ParsedLog, dict[str, Any]]:
    log = payload.get("log")
    if isinstance(log, list) and all(isinstance(x, str) for x in log):
        log = "\n".join(log)
    if not isinstance(log, str):
        raise EmptyInput("structured input needs a 'log' string")
    parsed = parse_log(log, max_bytes=max_bytes)
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
