"""Python tracebacks in a cleaned crash log: frames, exception lines, chains and groups.

:func:`find_exceptions` makes a single pass over the lines of
:func:`~service.engine.logparse.text.clean_log_marked` and finds Python tracebacks (with or
without their ``Traceback (most recent call last):`` header), chained
exceptions (``The above exception was the direct cause ...``), exception
groups (``| `` margins) and exception lines without frames. Cut frames
(``...``, ``[Previous line repeated ...]``), caret lines and interleaved log
records are tolerated. :func:`pick_primary` chooses the exception the triage
is about, and :func:`package_path` reduces a frame path to its ``sglang/...``
part.

Every regular expression is linear-time (also under ``search``: the patterns used with
``match`` are anchored with ``^``) and sees at most
:data:`~service.engine.logparse.text.SCAN_CHARS` characters of a line. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from service.engine.logparse.text import SCAN_CHARS

__all__ = [
    "MAX_EXCEPTIONS",
    "UNKNOWN_TYPE",
    "ExceptionInfo",
    "Frame",
    "exception_name",
    "find_exceptions",
    "package_path",
    "pick_primary",
]

MAX_EXCEPTIONS = 1000  # only the last ones are kept
UNKNOWN_TYPE = "<unknown>"  # type of a traceback whose exception line is missing
_MAX_MESSAGE_LINES = 50
_MAX_SOURCE_LINES = 20
_MAX_NOTES = 20


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


# --------------------------------------------------------------------------- tracebacks

_HEADER = "Traceback (most recent call last)"
_CAUSE = "The above exception was the direct cause of the following exception"
_CONTEXT = "During handling of the above exception, another exception occurred"
_FRAME_RE = re.compile(r'^([ \t]*)File "([^"\n]{1,4096})", line (\d{1,9})(.*)')
_LOGLINE_RE = re.compile(
    r"^(?:(?:- )?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b|[IWEF]\d{4} \d\d:\d\d:\d\d"
    r"|\S{1,300}\.py:\d{1,7}: )"
)
_GROUP_RE = re.compile(r"^([ \t]*)\| ?")
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


def exception_name(line: str) -> tuple[str, str | None] | None:
    """``(qualified name, text after the colon or None)`` when the stripped ``line`` is an
    exception line on its own (a name ending in Error, Exception, Exit or Interrupt)."""
    return _exc_name(line.strip()[:SCAN_CHARS], strict=True)


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
    """One pass over the cleaned lines collecting exceptions (see :func:`find_exceptions`).

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


def find_exceptions(
    lines: Sequence[str], marks: Sequence[bool]
) -> tuple[list[ExceptionInfo], list[str]]:
    """The exceptions in ``lines`` (the last :data:`MAX_EXCEPTIONS`) and notes on what was odd.

    ``marks`` flags the lines that start a new log record (see
    :func:`~service.engine.logparse.text.clean_log_marked`); they end exception messages.
    """
    scanner = _Scanner(lines, marks)
    exceptions = scanner.run()
    return exceptions, scanner.notes


def pick_primary(excs: Sequence[ExceptionInfo]) -> ExceptionInfo | None:
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
