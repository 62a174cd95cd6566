"""Partial crash logs: an error message without a traceback, and what a log leaves out.

Users often paste less than a traceback: the one line SGLang printed
(``speculative_eagle_topk must be 1 when ...``), an indented
``AssertionError: ...`` line, or frames cut before the exception line.
:func:`find_message` reads such a message, when the log holds no traceback,
exception line or argparse error, into an :class:`~service.engine.logparse.frames.ExceptionInfo`
with no frames (type :data:`~service.engine.logparse.frames.UNKNOWN_TYPE` when the line names
none), so the engine can locate it by its message template. :func:`missing_parts`
says what a parsed log lacks, for the answer to report instead of refusing the log.

Only lines that look like an SGLang message count: a ``snake_case`` name or a
``--flag`` in them, and an error word (``must``, ``not``, ``invalid``...) unless
it is the last line of the log. Pure, and every regular expression is linear and
sees at most :data:`~service.engine.logparse.text.SCAN_CHARS` characters of a line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.engine.logparse.frames import UNKNOWN_TYPE, ExceptionInfo, exception_name
from service.engine.logparse.text import SCAN_CHARS

__all__ = ["command_lines", "command_only", "find_message", "missing_parts"]

_MAX_SCAN_LINES = 5000  # lines from the end of the log looked at for a message
_MAX_MESSAGE_CHARS = 2000
_LEVEL_RE = re.compile(r"^\[?(?:ERROR|CRITICAL|FATAL|WARNING|WARN|Error|Fatal)\]?(?::| -)? {1,8}")
_SIGNAL_RE = re.compile(
    r"(?<![\w-])(?:[a-z][a-z0-9]{0,40}_[a-z0-9_]{1,80}|--[a-z][\w-]{1,80})|sglang|SGLang"
)
_ERROR_WORDS = (
    "must",
    "should",
    "not ",
    "only",
    "requir",
    "unsupported",
    "invalid",
    "cannot",
    "can't",
    "error",
    "failed",
    "expected",
    "incompatible",
    "exceed",
)
_NOT_MESSAGES = (
    'File "',
    "$ ",
    "-",
    "[",
    "{",
    "usage:",
    "Traceback",
    "#",
    "(",
    "INFO",
    "DEBUG",
    "+ ",
    "> ",
)
_KEY_LINE_RE = re.compile(r"^[\w.\"'-]{1,64}:(?: |$)")
_COMMAND_HINTS = ("sglang.launch_server", "launch_server.py", "sglang serve", "ServerArgs(")


def _candidate(line: str, last: bool) -> tuple[str, str | None] | None:
    """``(message, exception type or None)`` when ``line`` reads as an SGLang message."""
    s = line[:_MAX_MESSAGE_CHARS].strip()
    if not s or s.startswith(_NOT_MESSAGES) or any(h in s for h in _COMMAND_HINTS):
        return None
    level = _LEVEL_RE.match(s)
    if level is not None:
        s = s[level.end() :].strip()
    named = exception_name(s)
    if named is not None and named[1] is not None and named[1].strip():
        return named[1].strip(), named[0]
    if named is not None or len(s.split()) < 3 or _SIGNAL_RE.search(s) is None:
        return None
    lowered = s.lower()
    if not last and level is None and not any(w in lowered for w in _ERROR_WORDS):
        return None
    return s, None


def command_lines(lines: Sequence[str], starts: Sequence[int]) -> frozenset[int]:
    """0-based indexes of the lines of the commands starting at ``starts``: each start and
    the lines it continues onto with a trailing backslash (at most 500)."""
    out: set[int] = set()
    for start in starts:
        k = start
        while 0 <= k < len(lines) and k - start < 500:
            out.add(k)
            if not lines[k].rstrip().endswith("\\"):
                break
            k += 1
    return frozenset(out)


def find_message(lines: Sequence[str], skip: frozenset[int] = frozenset()) -> ExceptionInfo | None:
    """The last SGLang error message of a log with no traceback, as a frameless exception.

    ``skip`` holds 0-based indexes of lines already read as something else (the
    launch command). The message keeps its exception type when the line names one
    (``  AssertionError: ...``), else the type is ``<unknown>``.
    """
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i in range(len(lines) - 1, max(-1, len(lines) - 1 - _MAX_SCAN_LINES), -1):
        if i in skip:
            continue
        found = _candidate(lines[i], i == last)
        if found is None:
            continue
        message, name = found
        qualified = name or UNKNOWN_TYPE
        return ExceptionInfo(
            type=qualified.rsplit(".", 1)[-1],
            qualified_type=qualified,
            message=message,
            bare=False,
            frames=[],
            context=None,
            start_line=i + 1,
        )
    return None


def missing_parts(primary: ExceptionInfo | None, argparse_error: bool) -> list[str]:
    """What the log lacks for a full triage, in words (empty for a complete crash)."""
    if argparse_error:
        return []
    if primary is None:
        return ["the exception or error message (only the launch command was found)"]
    missing = []
    if primary.type == UNKNOWN_TYPE:
        missing.append(
            "the exception line (the traceback is cut before it)"
            if primary.frames
            else "the exception type"
        )
    if not primary.frames:
        missing.append("the traceback frames")
    return missing


def command_only(lines: Sequence[str]) -> bool:
    """Whether every non-blank line reads as part of a launch command: shell lines with
    flags or continuations, prompts, YAML/JSON list items and ``command:``/``args:`` keys.

    A pasted command alone is a question about that command; a log that also shows
    other output with no error in it (``server started``) is not a crash report.
    """
    for line in lines:
        s = line[:SCAN_CHARS].strip()
        if not s or s.startswith(("-", "[", "]", "$", "#", "+ ", "> ")) or s.endswith("\\"):
            continue
        if "--" in s or "sglang" in s or _KEY_LINE_RE.match(s) is not None:
            continue
        return False
    return True
