"""Launch a command transparently and keep a bounded tail of what it printed.

:func:`launch` runs the command as it is: its environment, working folder and stdin are
ours, its stdout and stderr bytes are copied to ours unchanged and as they come (when our
stdout or stderr is a terminal, the child gets a pseudo-terminal of its own for that
stream, with our window size, so SGLang's colours and progress bars look the same), and its
exit code is returned (``128 + N`` when signal ``N`` ended it, as a shell says it).

Signals: the child runs in a session (and process group) of its own, without a
controlling terminal, so a Ctrl-C at the terminal reaches it once, through us: SIGINT,
SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to us are forwarded to the child's
group (SGLang and its worker processes); a second SIGINT kills the group (SIGKILL). Our
handlers stay until the child has exited, even when it closed its output earlier.

While copying, every complete line (ANSI escapes and carriage-return overwrites removed)
goes into a :class:`Tail`: at most ``max_lines`` lines and ``max_bytes`` bytes, each line
at most ``max_line_chars`` characters, whatever the child prints; the tail notes whether
SGLang's ready line (:func:`service.watch.ready.is_ready_line`) was seen and how many
lines were dropped. Output that arrives after the child exited, from processes it left
behind holding the streams, is copied for at most :data:`DRAIN_S` seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import selectors
import signal
import subprocess
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

from service.watch.ready import is_ready_line

__all__ = [
    "DRAIN_S",
    "FORWARDED",
    "LaunchResult",
    "LineSplitter",
    "Tail",
    "clean_line",
    "exit_code_of",
    "launch",
]

#: signals forwarded to the child's process group (a second SIGINT becomes SIGKILL)
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
#: how long output still arriving after the child exited is copied
DRAIN_S = 2.0
_READ = 65536
_ANSI = re.compile(
    r"\x1b\[[0-9;?]{0,32}[ -/]{0,4}[@-~]|\x1b\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)|\x1b[@-_]"
)


def clean_line(raw: str) -> str:
    """A line as a log keeps it: ANSI escapes removed, what a carriage return overwrote
    dropped (``50%\\r100%`` -> ``100%``), trailing white space stripped."""
    text = _ANSI.sub("", raw) if "\x1b" in raw else raw
    text = text.rstrip("\r\n ")
    if "\r" in text:
        text = text.rpartition("\r")[2]
    return text.rstrip()


@dataclass
class Tail:
    """The last lines a launch printed, bounded in lines, bytes and line length."""

    max_lines: int = 2000
    max_bytes: int = 256 * 1024
    max_line_chars: int = 4000
    lines: deque[str] = field(default_factory=deque)
    size: int = 0  # UTF-8 bytes of the lines held
    seen: int = 0  # lines seen in all
    dropped: int = 0  # lines dropped from the front
    ready: bool = False  # SGLang's ready line was seen
    ready_line: str | None = None

    def add(self, line: str) -> None:
        line = clean_line(line)[: self.max_line_chars]
        self.seen += 1
        if not self.ready and is_ready_line(line):
            self.ready, self.ready_line = True, line
        n = len(line.encode("utf-8", "replace")) + 1
        self.lines.append(line)
        self.size += n
        while self.lines and (len(self.lines) > self.max_lines or self.size > self.max_bytes):
            self.size -= len(self.lines.popleft().encode("utf-8", "replace")) + 1
            self.dropped += 1

    def text(self) -> str:
        return "\n".join(self.lines)


class LineSplitter:
    """Bytes of one stream -> complete lines; a line longer than ``max_bytes`` is cut there
    (so the pending part stays bounded)."""

    def __init__(self, emit: Callable[[str], None], max_bytes: int = 16384) -> None:
        self.emit, self.max_bytes, self.pending = emit, max_bytes, bytearray()

    def feed(self, data: bytes) -> None:
        self.pending += data
        while True:
            i = self.pending.find(b"\n")
            if i < 0:
                break
            self._emit(bytes(self.pending[:i]))
            del self.pending[: i + 1]
        while len(self.pending) >= self.max_bytes:
            self._emit(bytes(self.pending[: self.max_bytes]))
            del self.pending[: self.max_bytes]

    def close(self) -> None:
        if self.pending:
            self._emit(bytes(self.pending))
            self.pending.clear()

    def _emit(self, raw: bytes) -> None:
        self.emit(raw.decode("utf-8", "replace"))


@dataclass
class LaunchResult:
    """How a launch ended."""

    returncode: int  # as Popen says it: negative when a signal ended the child
    exit_code: int  # as a shell says it: 128 + N for signal N
    tail: Tail
    signal: int | None = None  # the signal that ended the child
    forwarded: list[int] = field(default_factory=list)  # signals passed on, in order
    killed: bool = False  # a second SIGINT killed it
    error: str | None = None  # the command could not be started
    pty: bool = False  # a stream went through a pseudo-terminal
    pid: int | None = None


def exit_code_of(returncode: int) -> int:
    """A shell's exit status for Popen's ``returncode`` (``-15`` -> 143)."""
    return 128 - returncode if returncode < 0 else returncode


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data``; False when ``fd`` is gone (a closed pipe)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return False
        view = view[n:]
    return True


def _copy_winsize(src: int, dst: int) -> None:
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(src, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(dst, termios.TIOCSWINSZ, size)


def _open_pty(like: int) -> tuple[int, int]:
    """A pseudo-terminal for a stream whose reader is the terminal ``like``: our window size,
    and no newline translation (our own terminal translates what we copy to it)."""
    import pty

    master, slave = pty.openpty()
    _copy_winsize(like, slave)
    with contextlib.suppress(termios.error):
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
    return master, slave


class _Forwarder:
    """Our signal handlers while the child runs (installed only on the main thread)."""

    def __init__(self, pid: int, result: LaunchResult, ptys: list[tuple[int, int]]) -> None:
        self.pid, self.result, self.ptys = pid, result, ptys
        self.old: dict[int, object] = {}
        self.interrupts = 0

    def __enter__(self) -> _Forwarder:
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED:
                self.old[sig] = signal.signal(sig, self.handle)
            if self.ptys:
                self.old[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, self.winch)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self.old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]

    def _kill(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts >= 2:
                self.result.killed = True
                self.result.forwarded.append(int(signal.SIGKILL))
                self._kill(signal.SIGKILL)
                return
        self.result.forwarded.append(int(signum))
        self._kill(signum)

    def winch(self, _signum: int, _frame: FrameType | None) -> None:
        for like, master in self.ptys:
            _copy_winsize(like, master)


def launch(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stdout_fd: int = 1,
    stderr_fd: int = 2,
    use_pty: bool | None = None,
    tail: Tail | None = None,
    on_line: Callable[[str], None] | None = None,
) -> LaunchResult:
    """Run ``argv`` transparently (see the module docstring) and return how it ended.

    ``stdout_fd``/``stderr_fd`` are where the child's output is copied (ours by default);
    ``use_pty`` None gives a stream a pseudo-terminal when its destination is a terminal.
    ``on_line`` sees every line the tail sees (after cleaning). A command that cannot be
    started is exit code 127 (not found) or 126 (not executable), as in a shell."""
    tail = tail if tail is not None else Tail()
    sinks: dict[int, int] = {}  # our read fd -> destination fd
    child_ends: list[int] = []
    ptys: list[tuple[int, int]] = []
    spec: list[int] = []
    for dest in (stdout_fd, stderr_fd):
        tty = os.isatty(dest) if use_pty is None else use_pty
        if tty:
            master, slave = _open_pty(dest)
            sinks[master] = dest
            ptys.append((dest, master))
            child_ends.append(slave)
            spec.append(slave)
        else:
            r, w = os.pipe()
            sinks[r] = dest
            child_ends.append(w)
            spec.append(w)

    def emit(line: str) -> None:
        tail.add(line)
        if on_line is not None:
            on_line(tail.lines[-1] if tail.lines else line)

    try:
        proc = subprocess.Popen(
            list(argv),
            env=env,
            stdout=spec[0],
            stderr=spec[1],
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        for fd in [*sinks, *child_ends]:
            os.close(fd)
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return LaunchResult(
            returncode=code,
            exit_code=code,
            tail=tail,
            error=f"{argv[0] if argv else '(empty command)'}: {exc.strerror or exc}",
        )
    for fd in child_ends:
        os.close(fd)
    result = LaunchResult(returncode=0, exit_code=0, tail=tail, pty=bool(ptys), pid=proc.pid)
    splitters = {fd: LineSplitter(emit) for fd in sinks}
    with _Forwarder(proc.pid, result, ptys):  # until the child is gone, not only its output
        with selectors.DefaultSelector() as sel:
            for fd in sinks:
                sel.register(fd, selectors.EVENT_READ)
            _pump(sel, sinks, splitters, proc)
        for fd in list(sinks):
            splitters[fd].close()
            with contextlib.suppress(OSError):
                os.close(fd)
        rc = proc.wait()
    result.returncode, result.exit_code = rc, exit_code_of(rc)
    result.signal = -rc if rc < 0 else None
    return result


def _pump(
    sel: selectors.BaseSelector,
    sinks: dict[int, int],
    splitters: dict[int, LineSplitter],
    proc: subprocess.Popen[bytes],
) -> None:
    """Copy until every stream ends, or :data:`DRAIN_S` after the child exited."""
    exited_at: float | None = None
    broken: set[int] = set()
    while sel.get_map():
        for key, _ in sel.select(0.1):
            fd = int(key.fd)
            try:
                data = os.read(fd, _READ)
            except BlockingIOError:
                continue
            except OSError:  # EIO: a pseudo-terminal whose other side is closed
                data = b""
            if not data:
                sel.unregister(fd)
                continue
            if fd not in broken and not _write_all(sinks[fd], data):
                # our reader went away: the child's next write fails, as it would directly
                broken.add(fd)
                sel.unregister(fd)
                os.close(fd)
                sinks.pop(fd)
                splitters[fd].feed(data)
                continue
            splitters[fd].feed(data)
        if proc.poll() is not None:
            now = time.monotonic()
            exited_at = exited_at or now
            if now - exited_at > DRAIN_S:
                break
