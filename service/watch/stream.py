"""Where ``sglang-triage watch`` reads its lines: a file, standard input or a log client.

Every source yields decoded lines (``str``, without the newline) and, while following,
``None`` as an *idle tick* when nothing arrived for ``idle_s`` seconds (the watcher then
settles a crash it has seen). Reading is bounded and binary-safe (:class:`LineSplitter`):

* bytes are read in chunks of :data:`CHUNK` with ``os.read`` (a pipe's lines come as
  soon as they are written, never waiting for a full buffer);
* a line longer than :data:`MAX_LINE_BYTES` is cut there and the rest of it is skipped
  as it streams by, never held (a 50 MB line costs one chunk of memory);
* invalid UTF-8 becomes U+FFFD, NUL and other control bytes (but tab and ESC) are
  dropped, ``\\r\\n`` ends a line and a lone ``\\r`` (a progress bar redrawing itself)
  keeps only what follows it, as a terminal would show it.

Sources: :func:`file_lines` (``--file``; with ``follow`` it keeps reading as the file
grows and follows rotation: a new inode at the path, or a truncated file, is read from
its start), :func:`fd_lines` (standard input) and :class:`ClientSource` (``--journald
UNIT``, ``--docker NAME``, ``--kubectl POD``: ``journalctl -o short-iso -fu UNIT``,
``docker logs -f NAME`` with the container's stderr merged in, ``kubectl logs -f POD``;
without ``follow`` the same without ``-f``). A client that is not installed is a
:class:`SourceError` before anything runs.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "CHUNK",
    "CLIENTS",
    "MAX_LINE_BYTES",
    "ClientSource",
    "LineSplitter",
    "SourceError",
    "client_command",
    "fd_lines",
    "file_lines",
]

CHUNK = 64 * 1024
MAX_LINE_BYTES = 64 * 1024
#: the clients ``watch`` can follow, by option
CLIENTS = ("journald", "docker", "kubectl")
# control characters dropped from a decoded line (tab and ESC are kept)
_CONTROLS = {c: None for c in range(32) if c not in (9, 27)} | {127: None}


class SourceError(Exception):
    """A source could not be opened or its client failed (the CLI exits 2)."""


class LineSplitter:
    """Bytes in, bounded decoded lines out (see the module docstring).

    ``buffered`` is the number of bytes held for the current partial line, never more
    than :data:`MAX_LINE_BYTES`; ``cut`` counts the lines that were cut.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self._part = bytearray()
        self._skipping = False
        self.cut = 0
        self.lines = 0

    @property
    def buffered(self) -> int:
        """Bytes held for the line being read."""
        return len(self._part)

    def _decode(self, data: bytes) -> str:
        if data.endswith(b"\r"):
            data = data[:-1]
        k = data.rfind(b"\r")
        if k >= 0:
            data = data[k + 1 :]
        self.lines += 1
        return data.decode("utf-8", "replace").translate(_CONTROLS)

    def feed(self, data: bytes) -> list[str]:
        """The lines completed by ``data``."""
        out: list[str] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            if self._skipping:
                if nl >= 0:
                    self._skipping = False
                    out.append(self._decode(bytes(self._part)))
                    self._part.clear()
            else:
                room = self.max_line - len(self._part)
                self._part += data[start : min(end, start + room)]
                if end - start > room:
                    self.cut += 1
                    self._skipping = nl < 0
                    if nl >= 0:
                        out.append(self._decode(bytes(self._part)))
                        self._part.clear()
                elif nl >= 0:
                    out.append(self._decode(bytes(self._part)))
                    self._part.clear()
            if nl < 0:
                break
            start = nl + 1
        return out

    def finish(self) -> list[str]:
        """The last line, when the input did not end with a newline."""
        self._skipping = False
        if not self._part:
            return []
        line = self._decode(bytes(self._part))
        self._part.clear()
        return [line]

    def reset(self) -> None:
        """Forget a partial line (the file it came from was truncated)."""
        self._part.clear()
        self._skipping = False


def fd_lines(
    fd: int, *, idle_s: float | None = None, splitter: LineSplitter | None = None
) -> Iterator[str | None]:
    """The lines read from ``fd`` (a pipe, standard input, a file) until end of input.

    With ``idle_s`` a ``None`` is yielded each time nothing arrived for that long."""
    split = splitter or LineSplitter()
    while True:
        if idle_s is not None:
            ready, _, _ = select.select([fd], [], [], idle_s)
            if not ready:
                yield None
                continue
        try:
            data = os.read(fd, CHUNK)
        except InterruptedError:  # pragma: no cover - retried by Python since 3.5
            continue
        if not data:
            break
        yield from split.feed(data)
    yield from split.finish()


def file_lines(
    path: Path,
    *,
    follow: bool,
    poll_s: float = 0.25,
    idle_s: float = 2.0,
    stop: Callable[[], bool] | None = None,
    splitter: LineSplitter | None = None,
) -> Iterator[str | None]:
    """The lines of ``path``; with ``follow``, then the lines appended to it, forever
    (or until ``stop()`` is true), following rotation.

    While following, the path is checked after each read that found nothing: another
    inode there (``logrotate``'s rename and create, or ``copytruncate``'s new file) means
    the rest of the old file is read and the new one from its start; a file shorter than
    what was read means it was truncated, and it is read again from its start. A path
    that is briefly missing during a rotation is waited for. One ``None`` (idle tick) is
    yielded each time the file has been quiet for ``idle_s``.
    """
    split = splitter or LineSplitter()
    try:
        fh = open(path, "rb")  # noqa: SIM115 - reopened on rotation
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    quiet = 0.0
    try:
        while True:
            data = fh.read(CHUNK)
            if data:
                quiet = 0.0
                yield from split.feed(data)
                continue
            if not follow or (stop is not None and stop()):
                break
            try:
                now = os.stat(path)
            except FileNotFoundError:
                now = None
            mine = os.fstat(fh.fileno())
            if now is not None and (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
                yield from split.finish()  # the rest of the old file was read above
                fh.close()
                try:
                    fh = open(path, "rb")  # noqa: SIM115
                except FileNotFoundError:
                    fh = open(os.devnull, "rb")  # noqa: SIM115 - recreated later: stat differs
                continue
            if now is not None and now.st_size < fh.tell():
                split.reset()
                fh.seek(0)
                continue
            time.sleep(poll_s)
            quiet += poll_s
            if quiet >= idle_s:
                quiet = float("-inf")  # one tick per quiet spell
                yield None
        yield from split.finish()
    finally:
        fh.close()


def client_command(kind: str, name: str, *, follow: bool) -> list[str]:
    """The command line that streams the logs of ``name`` with the ``kind`` client."""
    if kind == "journald":
        return (
            ["journalctl", "-o", "short-iso", "-fu", name]
            if follow
            else ["journalctl", "-o", "short-iso", "--no-pager", "-u", name]
        )
    if kind == "docker":
        return ["docker", "logs", "-f", name] if follow else ["docker", "logs", name]
    if kind == "kubectl":
        return ["kubectl", "logs", "-f", name] if follow else ["kubectl", "logs", name]
    raise SourceError(f"unknown log client {kind!r}; one of {', '.join(CLIENTS)}")


class ClientSource:
    """The lines a log client prints (``journalctl``, ``docker logs``, ``kubectl logs``).

    The client runs as a child process; its stdout is read with :func:`fd_lines` (for
    ``docker logs`` its stderr too, where it relays the container's stderr, which is
    where tracebacks go). Closing the iterator (or the end of ``watch``) terminates it.
    After the iteration, ``returncode`` is the client's exit status and ``error`` says
    why it failed (its last stderr line), when it did.
    """

    def __init__(self, kind: str, name: str, *, follow: bool, idle_s: float = 2.0) -> None:
        self.argv = client_command(kind, name, follow=follow)
        self.kind, self.follow, self.idle_s = kind, follow, idle_s
        if shutil.which(self.argv[0]) is None:
            raise SourceError(
                f"--{kind} needs the `{self.argv[0]}` client, which is not installed or not on PATH"
            )
        self.returncode: int | None = None
        self.error: str | None = None

    def __iter__(self) -> Iterator[str | None]:
        # the client's own complaints go to a file, so a chatty stderr never blocks it
        errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if self.kind == "docker" else errors,
            )
        except OSError as exc:
            errors.close()
            raise SourceError(f"cannot run {self.argv[0]}: {exc.strerror or exc}") from exc
        assert proc.stdout is not None
        try:
            last_line = ""
            for line in fd_lines(proc.stdout.fileno(), idle_s=self.idle_s if self.follow else None):
                if line and line.strip():
                    last_line = line
                yield line
            self.returncode = proc.wait()
            if self.returncode != 0:
                errors.seek(max(0, errors.seek(0, os.SEEK_END) - CHUNK))
                said = errors.read(CHUNK).decode("utf-8", "replace")
                last = [ln for ln in said.splitlines() if ln.strip()] or [last_line]
                last = [ln for ln in last if ln]
                self.error = f"`{' '.join(self.argv)}` exited with status {self.returncode}" + (
                    f": {last[-1][:300]}" if last else ""
                )
        finally:
            errors.close()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.stdout.close()
