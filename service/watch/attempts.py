"""Cutting a log stream into start-up attempts, finding each attempt's crash, and its signatures.

A stream (``journalctl -fu sglang``, ``docker logs -f``, ``kubectl logs -f``, a file) holds
one launch attempt after another as a restart policy relaunches SGLang. :class:`Segmenter`
reads it one line at a time and hands back each attempt once its outcome is settled:

* **Per-line prefixes** (:func:`strip_line`): journald (``short`` and ``short-iso``),
  ISO timestamps (``docker logs -t``, ``kubectl logs --timestamps``), kubectl
  ``[pod/…]``, docker compose ``name-1  | ``, torch ``[rank0]:``, Ray ``(pid=…)``,
  launcher columns (``INFO [worker_0] 0: `` … ``launcher.py:123``) and Slurm/torchrun
  ``0: `` ranks (only while the stream carries them consistently). SGLang's own
  ``[timestamp]`` stays: the engine uses it to end tracebacks. The rank, pid, worker or
  compose service becomes the line's *source*.
* **Attempts**: a start line (:func:`service.watch.ready.is_start_line`: the launch command,
  the ``server_args=ServerArgs(`` dump, systemd's ``Started``) opens a new attempt when the
  current one has ended (crashed or exited) or when the same source already printed a start
  line of that kind or a later one (``Started`` < command < ``ServerArgs``), so the lines
  one launch prints in order stay one attempt. The ready line marks an attempt *up*.
* **Crashes**: a traceback's exception line (the first unindented line after
  ``Traceback (most recent call last):``, tracked per source so interleaved ranks do not
  mix), an argparse ``prog: error:`` line, or systemd's ``Main process exited``/``Failed
  with result``. Only the first crash of an attempt counts: eight ranks dying of the same
  assert are one crash. The crash is *settled* (handed back) at systemd's exit line, at
  the next attempt's start, :data:`SETTLE_LINES` lines later, on an idle tick (the stream
  went quiet) or at the end of the stream, so a chained traceback is complete.

Memory is bounded whatever the input: an attempt keeps the stripped text of its first
:data:`HEAD_LINES` lines (at most :data:`HEAD_CHARS` characters) and of its last
:data:`TAIL_LINES` (at most :data:`TAIL_CHARS` characters), per-source state
is capped at :data:`MAX_SOURCES` sources, and lines are cut at :data:`MAX_LINE_CHARS`.
Every pattern is linear-time and looks at a bounded prefix of the line.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections import deque
from dataclasses import dataclass, field

from service.engine import bare_rank, line_prefix, source_column, strip_ansi
from service.watch.ready import is_ready_line, is_start_line

__all__ = [
    "HEAD_CHARS",
    "HEAD_LINES",
    "MAX_LINE_CHARS",
    "MAX_SOURCES",
    "SETTLE_LINES",
    "TAIL_CHARS",
    "TAIL_LINES",
    "Attempt",
    "Segmenter",
    "StrippedLine",
    "command_key",
    "normalise",
    "signature",
    "strip_line",
]

MAX_LINE_CHARS = 64 * 1024
HEAD_LINES = 300  # the launch command and the ServerArgs dump come first
HEAD_CHARS = 1024 * 1024
TAIL_LINES = 2000
TAIL_CHARS = 4 * 1024 * 1024
SETTLE_LINES = 400  # lines after the first crash line that still belong to its report
MAX_SOURCES = 256

# ------------------------------------------------------------------------------ prefixes


@dataclass(frozen=True)
class StrippedLine:
    """One line: as read (``raw``), without transport prefixes and ANSI escapes (``text``),
    and the rank, pid, worker or compose service it came from (``source``, or None)."""

    raw: str
    text: str
    source: str | None


class _Prefixes:
    """The per-stream state of prefix stripping: whether bare ``0:`` ranks are consistent
    (30% of the last 200 lines) and which compose names recur."""

    def __init__(self) -> None:
        self._ranks: deque[bool] = deque(maxlen=200)
        self._rank_hits = 0
        self._compose: dict[str, int] = {}

    def _note_rank(self, hit: bool) -> None:
        if len(self._ranks) == self._ranks.maxlen:
            self._rank_hits -= self._ranks[0]
        self._ranks.append(hit)
        self._rank_hits += hit

    def _ranks_consistent(self) -> bool:
        """With this line counted as a rank line: 30% of the recent lines carry one."""
        return self._rank_hits + 1 >= 0.3 * (len(self._ranks) + 1)

    def _compose_name(self, name: str) -> bool:
        base = name.rstrip("0123456789")
        if base.endswith(("-", "_")) and 1 <= len(name) - len(base) <= 4:
            return True  # compose's replica suffix: ``sglang-1``, ``proj_sglang_1``
        if len(self._compose) >= 64 and name not in self._compose:
            self._compose.clear()
        self._compose[name] = self._compose.get(name, 0) + 1
        return self._compose[name] >= 2

    def strip(self, raw: str) -> StrippedLine:
        """``raw`` without its transport prefixes (the engine's
        :func:`~service.engine.line_prefix`; SGLang's ``[timestamp]`` stays) and ANSI
        escapes, a launcher's right-aligned ``file.py:NNN`` column cut, with its source."""
        line = strip_ansi(raw[:MAX_LINE_CHARS])
        source: list[str] = []
        launcher = rank_seen = False
        for _ in range(8):
            found = line_prefix(line, compose=self._compose_name)
            if found is None and not rank_seen and line[:1].isdigit():
                rank_seen = bare_rank(line)
                if rank_seen and self._ranks_consistent():
                    found = line_prefix(line, rank=True)
            if found is None:
                break
            launcher = launcher or found.kind == "launcher"
            if found.source:
                source.append(found.source)
            line = line[found.end :]
        if line.strip():
            self._note_rank(rank_seen)
        if launcher and (cut := source_column(line)) is not None:
            line = line[:cut]
        return StrippedLine(raw, line.rstrip("\r\n"), "/".join(source) or None)


def strip_line(raw: str) -> StrippedLine:
    """One line without its transport prefixes, read on its own (no stream state: a bare
    ``0:`` rank is kept, a compose name needs a replica suffix such as ``-1``)."""
    return _Prefixes().strip(raw)


# ---------------------------------------------------------------------------- markers

_TB_HEADER = "Traceback (most recent call last)"
_ARGPARSE_RE = re.compile(r"[ \t]{0,8}[\w.\-/]{1,200}: error: ")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_SYSTEMD_ENDS = ("Main process exited", "Failed with result")
_COMPOSE_EXIT_RE = re.compile(r"[A-Za-z0-9][\w.-]{0,63} exited with code (\d{1,5})")
_EXIT_STATUS_RE = re.compile(r"code=(exited|killed|dumped), status=(\d{1,5})")
_COMMAND_RE = re.compile(
    r"python[\d.]{0,8}\s{1,8}-m\s{1,8}sglang\.launch_server\b"
    r"|\bsglang\s{1,8}serve\b"
)
_FRAME_RE = re.compile(r'\s{1,40}File "([^"]{1,1000})", line (\d{1,7}), in (\S{1,200})')
_DIGITS_RE = re.compile(r"\d+")
_HEX_RE = re.compile(r"0x[0-9a-fA-F]{1,32}")
_SPACE_RE = re.compile(r"\s+")


def _exit_line(text: str) -> tuple[bool, int | None]:
    """Is ``text`` systemd's ``unit.service: Main process exited, …``/``Failed with result``
    line or docker compose's ``sglang-1 exited with code 1``, and the exit status it names
    (None for a signal or no status)."""
    if " exited with code " in text[:120]:
        c = _COMPOSE_EXIT_RE.fullmatch(text.rstrip(), 0, 120)
        if c is not None:
            return True, int(c[1])
    k = text.find(".service: ", 0, 300)
    if k <= 0 or " " in text[:k] or not text.startswith(_SYSTEMD_ENDS, k + 10):
        return False, None
    m = _EXIT_STATUS_RE.search(text, k, k + 200)
    return True, (int(m[2]) if m is not None and m[1] == "exited" else None)


def _is_start(line: StrippedLine) -> bool:
    """:func:`~service.watch.ready.is_start_line` of the line (systemd's ``Started`` is
    read before its journald prefix goes), asked only of lines that can be one."""
    head = line.text[:4000]
    if "sglang" in head or "ServerArgs" in head:
        return is_start_line(head)
    return "systemd[" in line.raw[:300] and is_start_line(line.raw[:400])


def _start_kind(line: StrippedLine) -> int | None:
    """Which start line this is, in the order one launch prints them: 0 systemd's
    ``Started``, 1 the launch command, 2 SGLang's ``'python -m sglang.launch_server' is
    still supported`` warning (0.5.10 on), 3 the ``ServerArgs`` dump; None for the
    warning's own ``Example: sglang serve …`` line, which starts nothing."""
    text = line.text[:4000]
    if "server_args=ServerArgs(" in text:
        return 3
    if "is still supported" in text or "UserWarning" in text:
        return 2
    if text.lstrip().startswith("Example:"):
        return None
    if "systemd[" in line.raw[:300] and "Started" in line.raw[:400]:
        return 0
    return 1


def _command_at(text: str) -> str | None:
    """The launch command on this line (``python3 -m sglang.launch_server --…``,
    ``sglang serve --…``): flags or nothing must follow, so SGLang's warning that quotes
    ``'python -m sglang.launch_server'`` is not taken for one."""
    if "sglang" not in text[:4000]:
        return None
    m = _COMMAND_RE.search(text, 0, 4000)
    if m is None or "Example:" in text[: m.start()]:
        return None
    rest = text[m.end() : m.end() + 20].lstrip()
    if rest and not rest.startswith("-"):
        return None
    start = max(text.rfind(" ", 0, m.start()), text.rfind("\t", 0, m.start())) + 1
    return text[start : start + 10_000].strip()  # from the interpreter's path, if one is given


def _relaunch(text: str) -> bool:
    """A line only a new run prints after a settled crash: a new traceback, argparse usage."""
    return _TB_HEADER in text[:200] or text.startswith("usage: ")


def normalise(text: str, limit: int = 300) -> str:
    """``text`` with addresses and numbers blanked and blanks collapsed (so a repeat with new
    pids, ports or timestamps reads the same), cut at ``limit`` characters."""
    text = _HEX_RE.sub("0x?", text[: limit * 2])
    return _SPACE_RE.sub(" ", _DIGITS_RE.sub("N", text)).strip()[:limit]


def command_key(command: str | None) -> str:
    """A command line with its blanks collapsed (values are kept: ``--tp 4`` is not
    ``--tp 8``) and a shell prompt dropped, cut at 10,000 characters."""
    if not command:
        return ""
    return _SPACE_RE.sub(" ", command[:10_000]).strip().removeprefix("$ ")


def signature(*parts: object) -> str:
    """A short stable key for ``parts`` (a 16-hex-digit SHA-1 prefix)."""
    return hashlib.sha1(
        "\x1f".join("" if p is None else str(p) for p in parts).encode(), usedforsecurity=False
    ).hexdigest()[:16]


# ---------------------------------------------------------------------------- attempts


@dataclass
class Attempt:
    """One launch attempt: its kept lines, whether it came up, and its crash."""

    index: int
    head: list[StrippedLine] = field(default_factory=list)
    tail: deque[StrippedLine] = field(default_factory=deque)
    head_chars: int = 0
    tail_chars: int = 0
    lines_seen: int = 0
    dropped: int = 0
    up: bool = False
    #: how the crash showed: ``traceback``, ``argparse`` or ``exit`` (systemd only)
    crash: str | None = None
    crash_source: str | None = None
    #: the exception (or argparse error) line and the innermost frame before it
    crash_line: str = ""
    crash_frame: str = ""
    exit_code: int | None = None
    exited: bool = False
    #: the launch command each source printed first (None: lines without a source)
    commands: dict[str | None, str] = field(default_factory=dict)
    after_crash: int = 0
    settled: bool = False
    starts: dict[str | None, int] = field(default_factory=dict)

    # -- keeping lines ---------------------------------------------------------------
    def keep(self, line: StrippedLine) -> None:
        """Keep ``line`` (its stripped text and source; not the raw line) within the
        head/tail bounds."""
        self.lines_seen += 1
        line = StrippedLine("", line.text, line.source)
        if (
            not self.tail
            and len(self.head) < HEAD_LINES
            and self.head_chars + len(line.text) <= HEAD_CHARS
        ):
            self.head.append(line)
            self.head_chars += len(line.text)
            return
        self.tail.append(line)
        self.tail_chars += len(line.text)
        while self.tail and (len(self.tail) > TAIL_LINES or self.tail_chars > TAIL_CHARS):
            self.tail_chars -= len(self.tail.popleft().text)
            self.dropped += 1

    def lines(self) -> list[StrippedLine]:
        """Every kept line, in order (the head, then the tail)."""
        return [*self.head, *self.tail]

    def crash_lines(self) -> list[str]:
        """The kept lines of the crashing source (plus lines of no source), prefixes
        stripped: what is triaged. Other ranks' interleaved copies of the crash are left out."""
        want = self.crash_source
        if want is None:
            return [ln.text for ln in self.lines()]
        return [
            ln.text
            for ln in self.lines()
            if ln.source is None or ln.source == want or want.startswith(f"{ln.source}/")
        ]

    @property
    def ended(self) -> bool:
        """Whether a crash or an exit has been seen (a start line then opens a new attempt)."""
        return self.crash is not None or self.exited

    def presignature(self, status: str) -> str:
        """A key computed from the stream alone: the command, the exception line and the
        innermost frame (numbers in the message blanked). Equal keys are the same crash,
        so a restart loop is recognised before anything is triaged again."""
        return signature(
            "pre",
            status,
            command_key(self.command),
            self.crash,
            normalise(self.crash_line),
            self.crash_frame,
        )

    @property
    def command(self) -> str | None:
        """The launch command of the crashing source, else of the lines without a source,
        else the first one printed."""
        for src in (self.crash_source, None):
            if src in self.commands:
                return self.commands[src]
        return next(iter(self.commands.values()), None)

    def argv(self) -> list[str] | None:
        """The launch command split like a shell would, when the stream printed it."""
        command = self.command
        if not command:
            return None
        try:
            return shlex.split(command)
        except ValueError:
            return command.split()


class Segmenter:
    """Feeds lines in, hands settled attempts out (see the module docstring).

    ``feed(line)`` and ``tick()`` (the stream has been quiet) return the attempts whose
    outcome just settled, each with a crash or having exited; ``close()`` settles what
    is left at the end of the stream. Attempts that end without a crash or exit (a
    restart after a clean stop, a server still up at the end) are not returned.
    """

    def __init__(self) -> None:
        self._prefixes = _Prefixes()
        self._tb: dict[str | None, str] = {}  # source -> "frames" while in a traceback
        self._last_frame: dict[str | None, str] = {}
        self.current: Attempt | None = None
        self.count = 0

    def _open(self) -> Attempt:
        self.count += 1
        self._tb.clear()
        self._last_frame.clear()
        self.current = Attempt(self.count)
        return self.current

    def _settle(self, attempt: Attempt | None) -> list[Attempt]:
        if attempt is None or attempt.settled or not attempt.ended:
            return []
        attempt.settled = True
        return [attempt]

    def feed(self, raw: str) -> list[Attempt]:
        """Read one line (without its newline); the attempts settled by it."""
        line = self._prefixes.strip(raw)
        done: list[Attempt] = []
        att = self.current
        kind = _start_kind(line) if _is_start(line) else None
        if kind is not None:
            if att is None or att.ended or att.starts.get(line.source, -1) >= kind:
                done += self._settle(att)
                att = self._open()
            att.starts[line.source] = max(kind, att.starts.get(line.source, -1))
        elif att is None or (
            att.settled
            and att.crash is not None
            and line.source == att.crash_source
            and _relaunch(line.text)
        ):
            att = self._open()  # no start line, but the crashed source fails again
        att.keep(line)
        if (
            line.source not in att.commands
            and len(att.commands) < MAX_SOURCES
            and (command := _command_at(line.text)) is not None
        ):
            att.commands[line.source] = command
        if is_ready_line(line.text):
            att.up = True
        self._crash_markers(att, line)
        if att.crash is not None and not att.settled:
            att.after_crash += 1
            if att.exited or att.after_crash > SETTLE_LINES:
                done += self._settle(att)
        return done

    def _crash_markers(self, att: Attempt, line: StrippedLine) -> None:
        text, src = line.text, line.source
        end, code = _exit_line(text)
        if end:
            att.exited = True
            if code is not None and att.exit_code is None:
                att.exit_code = code
            if att.crash is None and code != 0:
                att.crash, att.crash_source, att.crash_line = "exit", None, text[:1000]
            return
        if _TB_HEADER in text[:4000]:
            if len(self._tb) >= MAX_SOURCES and src not in self._tb:
                self._tb.clear()
            self._tb[src] = "frames"
            return
        if src in self._tb:
            if not text.strip() or text[:1] in (" ", "\t"):
                frame = _FRAME_RE.match(text, 0, 1300)
                if frame is not None:
                    if len(self._last_frame) >= MAX_SOURCES and src not in self._last_frame:
                        self._last_frame.clear()
                    self._last_frame[src] = f"{frame[1]}:{frame[2]}:{frame[3]}"
                return
            del self._tb[src]
            if text.startswith(_CHAIN):
                return
            if att.crash is None:
                att.crash, att.crash_source = "traceback", src
                att.crash_line, att.crash_frame = text[:1000], self._last_frame.get(src, "")
            return
        if att.crash is None and _ARGPARSE_RE.match(text, 0, 300) is not None:
            att.crash, att.crash_source, att.crash_line = "argparse", src, text[:1000]

    def tick(self) -> list[Attempt]:
        """The stream has been quiet: a crash seen so far is complete."""
        att = self.current
        return self._settle(att) if att is not None and att.crash is not None else []

    def close(self) -> list[Attempt]:
        """The stream ended: settle the last attempt if it crashed or exited."""
        return self._settle(self.current)
