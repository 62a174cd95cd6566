"""Per-line transport prefixes: the one vocabulary the log reader and ``watch`` share.

Logs reach us through launchers and log systems that put something in front of
every line. :func:`line_prefix` recognises one such prefix at the start of a line
and says what it was and which rank, pid, worker or compose service it names:

* ``journald``: ``May 02 10:14:03 host ident[pid]: `` (``journalctl -o short``) and
  ``2026-05-02T10:14:03+0000 host ident[pid]: `` (``-o short-iso``; the pid is
  required there, so a ``docker logs -t`` line ``<ts> INFO foo: bar`` is not taken
  for one);
* ``timestamp``: an ISO timestamp (``2026-03-23T14:01:38.123Z ``);
* ``kubectl``: ``[pod/name/container] ``;
* ``rank``: torch.distributed ``[rank0]: `` / ``[default0]: ``, Ray ``(pid=1234) ``
  and ``(SGLangWorker pid=1234, ip=...) ``, and a bare Slurm/torchrun ``0: `` (only
  when the caller says ranks prefix the stream consistently: ``rank=True``);
* ``launcher``: launcher columns ``INFO [worker_0] 0: ``, ``[worker_0] 0: ``,
  ``ERROR 3: ``, and Rich's ``RichHandler`` time and level columns
  ``[12/03/26 10:11:12] INFO     `` (the level padded to eight, then one blank, so the
  message's own indentation stays); such lines also carry a right-aligned
  ``file.py:NNN`` column, found by :func:`source_column`;
* ``sglang``: SGLang's own ``[2026-03-23 14:01:38 TP0] `` (only with
  ``sglang_ts=True``: it starts a new log record, which the reader marks);
* ``compose``: docker compose ``svc-1  | `` when the caller's ``compose`` predicate
  accepts the name (a stream has to carry it consistently).

Exactly one space after a prefix belongs to it, so indentation survives. The
match is dispatched on the line's first character and looks at most
:data:`SCAN` characters; every pattern is linear-time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "SCAN",
    "LinePrefix",
    "PrefixKind",
    "bare_rank",
    "compose_name",
    "line_prefix",
    "source_column",
    "strip_ansi",
]

SCAN = 400
"""Characters of a line the prefix patterns look at."""

PrefixKind = Literal["journald", "timestamp", "kubectl", "rank", "launcher", "sglang", "compose"]

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]{0,64}[ -/]{0,16}[@-~]|\x1b\][^\x07\x1b\n]{0,4096}(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?"
)
_ISO = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})"
_JOURNALD_RE = re.compile(
    r"[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} [^\s:\[]{1,255} [^\s:\[\]]{1,255}(?:\[\d{1,10}\])?: ?"
)
_JOURNALD_ISO_RE = re.compile(_ISO + r" [^\s:\[]{1,255} [^\s:\[\]]{1,255}\[\d{1,10}\]: ?")
_ISO_TS_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})? ?"
)
_SGLANG_TS_RE = re.compile(r"\[\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}[^\]\n]{0,80}\] ?")
_KUBECTL_RE = re.compile(r"\[pod/([^\]\s]{1,512})\] ?")
_TORCH_RANK_RE = re.compile(r"\[(?:rank|default)(\d{1,6})\]: ?")
_RAY_RE = re.compile(r"\((?:[A-Za-z_][\w.-]{0,100} )?pid=(\d{1,10})(?:, ip=[\w.:-]{1,64})?\) ?")
_LEVELS = r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)"
_LAUNCHER_RE = re.compile(
    rf"(?:{_LEVELS} {{1,16}})?\[([^\]\s]{{1,64}})\] {{0,4}}(\d{{1,5}}): ?|{_LEVELS} {{1,16}}(\d{{1,5}}): ?"
)
_RICH_RE = re.compile(
    r"\[\d{1,2}/\d{1,2}/\d{2,4} \d{1,2}:\d{2}:\d{2}(?: [AP]M)?\] "
    r"(?:INFO {5}|DEBUG {4}|ERROR {4}|WARNING {2}|WARN {5}|CRITICAL )"
)
_RANK_RE = re.compile(r"(\d{1,5}): ?")
_COMPOSE_RE = re.compile(r"([A-Za-z0-9][\w.-]{0,63}) {0,40}\|(?: |$)")
_COLUMN_RE = re.compile(r"[\w.-]{1,120}\.py:\d{1,7}")


@dataclass(frozen=True)
class LinePrefix:
    """One prefix at the start of a line: its kind, where the rest begins (``end``) and
    the rank, pid, worker or service it names (``source``: ``rank:0``, ``pid:1234``,
    ``worker_0:0``, ``svc:sglang-1``, or None)."""

    kind: PrefixKind
    end: int
    source: str | None = None


def strip_ansi(text: str) -> str:
    """``text`` without ANSI colour and OSC escapes."""
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


def _launcher(m: re.Match[str]) -> LinePrefix:
    source = f"{m[1]}:{int(m[2])}" if m[1] else f"rank:{int(m[3])}"
    return LinePrefix("launcher", m.end(), source)


def line_prefix(
    line: str,
    *,
    rank: bool = False,
    sglang_ts: bool = False,
    compose: Callable[[str], bool] | None = None,
) -> LinePrefix | None:
    """The transport prefix at the start of ``line``, or None (see the module docstring).

    ``rank`` also takes a bare ``0: ``; ``sglang_ts`` also takes SGLang's bracketed
    timestamp; ``compose`` decides whether a ``name | `` is a compose service (it is
    asked only for names that look like one, so it may count them)."""
    c = line[:1]
    if c in ("", " ", "\t"):
        return None  # no prefix starts with blank space: indentation is kept
    if c.isdigit():
        m = _JOURNALD_ISO_RE.match(line, 0, SCAN)
        if m is not None:
            return LinePrefix("journald", m.end())
        if (m := _ISO_TS_RE.match(line, 0, SCAN)) is not None:
            return LinePrefix("timestamp", m.end())
        if rank and (m := _RANK_RE.match(line, 0, 8)) is not None:
            return LinePrefix("rank", m.end(), f"rank:{int(m[1])}")
    elif c == "[":
        if line.startswith("[pod/"):
            m = _KUBECTL_RE.match(line, 0, SCAN)
            return LinePrefix("kubectl", m.end()) if m is not None else None
        if (m := _TORCH_RANK_RE.match(line, 0, SCAN)) is not None:
            return LinePrefix("rank", m.end(), f"rank:{int(m[1])}")
        if (m := _LAUNCHER_RE.match(line, 0, SCAN)) is not None:
            return _launcher(m)
        if (m := _RICH_RE.match(line, 0, SCAN)) is not None:
            return LinePrefix("launcher", m.end())
        if sglang_ts and (m := _SGLANG_TS_RE.match(line, 0, SCAN)) is not None:
            return LinePrefix("sglang", m.end())
    elif c == "(":
        if (m := _RAY_RE.match(line, 0, SCAN)) is not None:
            return LinePrefix("rank", m.end(), f"pid:{m[1]}")
    elif c.isupper():
        if (m := _JOURNALD_RE.match(line, 0, SCAN)) is not None:
            return LinePrefix("journald", m.end())
        if (m := _LAUNCHER_RE.match(line, 0, SCAN)) is not None:
            return _launcher(m)
    if compose is not None and "|" in line[:120]:
        m = _COMPOSE_RE.match(line, 0, 120)
        if m is not None and compose(m[1]):
            return LinePrefix("compose", m.end(), f"svc:{m[1]}")
    return None


def compose_name(line: str) -> str | None:
    """The docker compose service name that ``line`` starts with (``svc-1  | ``), if any."""
    m = _COMPOSE_RE.match(line, 0, 200) if "|" in line[:200] else None
    return m[1] if m is not None else None


def bare_rank(line: str) -> bool:
    """Whether ``line`` starts with a bare Slurm/torchrun rank (``0: ``)."""
    return _RANK_RE.match(line, 0, 8) is not None


def source_column(line: str) -> int | None:
    """Where a right-aligned launcher column (``   launcher.py:123``) starts in ``line``.

    Rich handlers and some launchers right-align the emitting ``file.py:NNN`` after at
    least two blanks. Checked in code from the end, so no pattern scans the whole line.
    Returns the length of the line's text before the column, or None when it has none.
    """
    line = line.rstrip()
    k = line.rfind(" ")
    if k < 2 or line[k - 1] != " " or not line[:k].strip() or len(line) - k > 140:
        return None
    if _COLUMN_RE.fullmatch(line, k + 1) is None:
        return None
    return len(line[:k].rstrip())
