"""Text handling shared by the crash-log readers: cleaning, the scan limit, quote-aware splitting.

:func:`clean_log` turns a pasted log into plain lines: CR line ends, a BOM and
ANSI escapes go, and so do per-line transport prefixes (SGLang's
``[timestamp]``, ISO timestamps, kubectl, journald, docker compose, rank, Ray and
launcher prefixes) and trailing launcher ``file.py:NNN`` columns. :func:`clean_log_marked` also says which lines start a new log
record, which the traceback scanner (:mod:`service.engine.logparse.frames`) uses to end
messages and tracebacks.

The other readers (:mod:`service.engine.logparse.command`, :mod:`service.engine.logparse.argparse_errors`,
:mod:`service.engine.logparse.environment`) share :func:`unquote` and
:func:`split_top_level`, and look at most :data:`SCAN_CHARS` characters of a
line. Every regular expression here is linear-time (no overlapping nested
quantifiers). Everything is pure: no I/O.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Sequence

from service.engine.logparse.prefixes import (
    bare_rank,
    compose_name,
    line_prefix,
    source_column,
    strip_ansi,
)

__all__ = [
    "MAX_LINE_CHARS",
    "SCAN_CHARS",
    "CpuBudget",
    "clean_log",
    "clean_log_marked",
    "split_top_level",
    "unquote",
]

SCAN_CHARS = 10_000
"""Characters of a line that regular expressions look at; the rest is ignored."""
MAX_LINE_CHARS = 100_000  # longer lines are cut (a ServerArgs repr can be ~15k characters)


class CpuBudget:
    """CPU seconds that reading one log may spend, checked between lines and stages.

    Counted with :func:`time.thread_time` (this thread's CPU time): a busy machine or
    other requests do not use it up, and no check depends on the wall clock.
    Regular expressions hold the GIL for a whole call, so with linear patterns and
    :data:`SCAN_CHARS`-bounded lines every piece of work between two checks is short;
    the budget ends a pathological input instead of letting it run for minutes.
    ``None`` is unlimited.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.start = time.thread_time()

    def spent(self) -> float:
        """CPU seconds used since the budget was made."""
        return time.thread_time() - self.start

    def exhausted(self) -> bool:
        """Whether more than :attr:`seconds` CPU seconds have been used."""
        return self.seconds is not None and self.spent() > self.seconds


# --------------------------------------------------------------------------- cleaning

_LEVELS = r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)"
_FRAMEISH_RE = re.compile(
    rf'^[ \t]{{0,40}}(?:File "|Traceback \(|{_LEVELS}\b|[A-Z][\w.]{{0,200}}:)'
)


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
            name = compose_name(line)
            if name is not None:
                counts[name] += 1
    if sum(counts.values()) < max(2, 0.3 * nonblank):
        return frozenset()
    return frozenset(name for name, c in counts.items() if c >= 2)


def _ranks_consistent(lines: Sequence[str]) -> bool:
    """Whether a bare ``0: `` rank starts at least two lines and 30% of the non-blank lines."""
    hits = nonblank = 0
    for line in lines:
        if line.strip():
            nonblank += 1
            hits += bare_rank(line)
    return hits >= max(2, 0.3 * nonblank)


def _strip_column(line: str, always: bool) -> str:
    """``line`` without its trailing launcher column: when the log carries the column
    consistently (``always``), or when the line looks like a frame, log or exception line."""
    cut = source_column(line) if "py:" in line[-140:] else None
    if cut is None:
        return line
    if always or _FRAMEISH_RE.match(line, 0, 300) is not None:
        return line[:cut]
    return line


def _strip_prefix(
    line: str, compose: frozenset[str], rank: bool = False
) -> tuple[str, bool, str | None]:
    """Remove transport prefixes (:func:`~service.engine.logparse.prefixes.line_prefix`,
    SGLang's ``[timestamp]`` included) from one line.

    Returns the rest, whether an SGLang ``[timestamp]`` was removed, and the compose
    service. ``rank`` also removes a bare ``0: `` rank prefix (the log carries it
    consistently).
    """
    marked = False
    service = None
    for _ in range(8):
        found = line_prefix(line, rank=rank, sglang_ts=True, compose=compose.__contains__)
        if found is None:
            break
        marked = marked or found.kind == "sglang"
        if found.kind == "compose":
            service = (found.source or "").removeprefix("svc:")
        line = line[found.end :]
    return line, marked, service


def clean_log_marked(text: str) -> tuple[list[str], list[bool], list[str]]:
    """The lines of :func:`clean_log`, per-line marks and notes (such as cut long lines).

    A line is marked when it starts a new log record: it carried an SGLang
    ``[timestamp]`` or comes from another compose service than the line before.
    """
    notes: list[str] = []
    text = text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    text = strip_ansi(text)
    raw = text.split("\n")
    if raw and not raw[-1]:
        raw.pop()
    long_lines = sum(1 for line in raw if len(line) > MAX_LINE_CHARS)
    if long_lines:
        notes.append(f"{long_lines} line(s) longer than {MAX_LINE_CHARS} characters were cut")
    compose = _compose_services(raw)
    rank = _ranks_consistent(raw)
    stripped = [_strip_prefix(line[:MAX_LINE_CHARS], compose, rank) for line in raw]
    columns = sum(1 for c, _, _ in stripped if "py:" in c[-140:] and source_column(c))
    always = columns >= max(3, 0.3 * sum(1 for line in raw if line.strip()))
    lines: list[str] = []
    marks: list[bool] = []
    previous = None
    for cleaned, marked, service in stripped:
        lines.append(_strip_column(cleaned.rstrip(), always))
        marks.append(marked or (service is not None and service != previous))
        previous = service or previous
    return lines, marks, notes


def clean_log(text: str) -> list[str]:
    """The log as lines without ANSI escapes, CR line ends or per-line prefixes.

    Removed prefixes: ``[2026-03-23 14:01:38 TP0] `` and other bracketed
    timestamps, ISO timestamps (``2026-03-23T14:01:38.123Z ``), kubectl
    ``[pod/name/container] ``, journald ``Mar 23 14:01:38 host python[1234]: ``
    and docker compose ``svc-1  | `` (only for service names that prefix the log
    consistently), torch.distributed ``[rank0]: ``, Ray ``(pid=1234) `` and
    ``(SGLangWorker pid=1234) ``, launcher columns (``INFO [worker_0] 0: ``) and a
    bare Slurm/torchrun rank ``0: `` (only when it prefixes the log consistently).
    A trailing launcher column (``   launcher.py:123``) goes when 30% of the lines
    (three at least) carry one, or on a line that looks like a frame, log or
    exception line. Indentation after a prefix is kept; trailing blanks are not.
    """
    return clean_log_marked(text)[0]


# --------------------------------------------------------------------------- splitting


def unquote(item: str) -> str:
    """``item`` without surrounding quotes, a trailing comma or a `` # comment``."""
    s = item.strip()
    if s.endswith(","):
        s = s[:-1].rstrip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    if " #" in s:
        s = s.split(" #", 1)[0].rstrip()
    return s


def split_top_level(body: str) -> tuple[list[str], bool]:
    """Split ``a=1, b=[2, 3])`` at top-level commas up to the closing parenthesis.

    Returns the parts and whether the closing parenthesis (or bracket) was reached.
    """
    parts: list[str] = []
    depth = 0
    quote = ""
    escaped = False
    start = 0
    for i, ch in enumerate(body):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                parts.append(body[start:i])
                return parts, True
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts, False
