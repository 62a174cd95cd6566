"""The transparent launch with real child processes: bytes, exit codes, signals, terminals
and the bounded tail. Signals go to a real launcher process (a small script calling
:func:`service.watch.launch.launch`), never to the test process."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.watch.launch import Tail, clean_line, launch

ROOT = Path(__file__).resolve().parents[3]
RUNNER = """\
import json, sys
sys.path.insert(0, {root!r})
from service.watch.launch import launch
r = launch(sys.argv[1:])
json.dump({{"exit_code": r.exit_code, "returncode": r.returncode, "signal": r.signal,
           "forwarded": r.forwarded, "killed": r.killed, "tail": list(r.tail.lines)}},
          open({out!r}, "w"))
sys.exit(r.exit_code)
"""


def _child(tmp_path: Path, source: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(source)
    return [sys.executable, str(script)]


def _fds(tmp_path: Path) -> tuple[int, int, Path, Path]:
    out, err = tmp_path / "out.bin", tmp_path / "err.bin"
    return (
        os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        out,
        err,
    )


def test_bytes_and_exit_code_pass_through_unchanged(tmp_path: Path) -> None:
    payload_out = bytes(range(256)) + b"\nno newline at the end"
    payload_err = "é ✓ \x1b[31mred\x1b[0m\r\n".encode() * 3
    argv = _child(
        tmp_path,
        f"import os, sys\nos.write(1, {payload_out!r})\nos.write(2, {payload_err!r})\n"
        "sys.exit(3)\n",
    )
    o, e, out, err = _fds(tmp_path)
    res = launch(argv, stdout_fd=o, stderr_fd=e, use_pty=False)
    os.close(o), os.close(e)
    assert (res.exit_code, res.returncode, res.signal, res.pty) == (3, 3, None, False)
    assert out.read_bytes() == payload_out and err.read_bytes() == payload_err
    assert res.tail.lines.count("é ✓ red") == 3 and "no newline at the end" in res.tail.lines


def test_the_environment_and_folder_are_the_callers(tmp_path: Path) -> None:
    argv = _child(tmp_path, "import os\nprint(os.environ['SGLANG_RUN_TEST'], os.getcwd())\n")
    o, e, out, _ = _fds(tmp_path)
    res = launch(
        argv, env={**os.environ, "SGLANG_RUN_TEST": "on"}, stdout_fd=o, stderr_fd=e, use_pty=False
    )
    os.close(o), os.close(e)
    assert res.exit_code == 0 and out.read_text() == f"on {os.getcwd()}\n"


def test_a_terminal_gets_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    o, e, _, err = _fds(tmp_path)
    argv = _child(
        tmp_path,
        "import sys\nprint(sys.stdout.isatty(), sys.stderr.isatty())\nprint('50%\\r100%')\n",
    )
    res = launch(argv, stdout_fd=slave, stderr_fd=e)
    os.set_blocking(master, False)
    seen = b""  # the terminal hands over what was written in pieces: read until it is quiet
    while select.select([master], [], [], 1.0)[0]:
        try:
            chunk = os.read(master, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            break
        seen += chunk
    os.close(master), os.close(slave), os.close(o), os.close(e)
    assert res.pty and list(res.tail.lines) == ["True False", "100%"]
    assert seen.replace(b"\r\n", b"\n") == b"True False\n50%\r100%\n"
    assert err.read_bytes() == b""


def test_a_missing_command_is_127(tmp_path: Path) -> None:
    res = launch([str(tmp_path / "no-such-program")], use_pty=False)
    assert res.exit_code == 127 and "no-such-program" in (res.error or "")


def test_the_tail_is_bounded_whatever_the_child_prints(tmp_path: Path) -> None:
    # 200,000 lines (about 20 MB) and a 3 MB line without a newline
    argv = _child(
        tmp_path,
        "import sys\nline = 'x' * 99 + '\\n'\nw = sys.stdout.write\n"
        "for i in range(200000):\n    w(line)\nw('y' * (3 << 20))\n",
    )
    o, e, out, _ = _fds(tmp_path)
    tail = Tail(max_lines=500, max_bytes=32 * 1024, max_line_chars=1000)
    res = launch(argv, stdout_fd=o, stderr_fd=e, use_pty=False, tail=tail)
    os.close(o), os.close(e)
    assert res.exit_code == 0 and out.stat().st_size == 200000 * 100 + (3 << 20)  # all copied
    assert len(tail.lines) <= 500 and tail.size <= 32 * 1024
    assert sum(len(x.encode()) + 1 for x in tail.lines) == tail.size
    assert all(len(x) <= 1000 for x in tail.lines) and tail.lines[-1] == "y" * 1000
    assert tail.seen == 200000 + 192 and tail.dropped == tail.seen - len(tail.lines)


def test_clean_line_drops_escapes_and_overwrites() -> None:
    assert clean_line("\x1b[1;32mINFO\x1b[0m ready\r\n") == "INFO ready"
    assert clean_line("Loading 10%\rLoading 100%") == "Loading 100%"


def test_the_ready_line_is_noted(tmp_path: Path) -> None:
    argv = _child(
        tmp_path,
        "print('[2026-05-02] The server is fired up and ready to roll!')\nraise SystemExit(1)\n",
    )
    o, e, _, _ = _fds(tmp_path)
    res = launch(argv, stdout_fd=o, stderr_fd=e, use_pty=False)
    os.close(o), os.close(e)
    assert res.exit_code == 1 and res.tail.ready and "ready to roll" in (res.tail.ready_line or "")


# ------------------------------------------------------------------------- signals


class _Launcher:
    """A real launcher process running ``argv`` through :func:`launch`."""

    def __init__(self, tmp_path: Path, argv: list[str]) -> None:
        self.result = tmp_path / "result.json"
        self.out = tmp_path / "launcher.out"
        runner = tmp_path / "runner.py"
        runner.write_text(RUNNER.format(root=str(ROOT), out=str(self.result)))
        with self.out.open("wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, str(runner), *argv], stdout=f, stderr=subprocess.STDOUT
            )

    def wait_for(self, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + 60
        while self.out.read_text().count(text) < count:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"never printed {text!r}: {self.out.read_text()!r}")
            time.sleep(0.02)

    def finish(self) -> tuple[int, dict]:
        try:
            code = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return code, json.loads(self.result.read_text())


TRAPS = """\
import signal, sys, time
def term(*_):
    print("got TERM", flush=True); sys.exit(143)
def intr(*_):
    print("got INT", flush=True)
signal.signal(signal.SIGTERM, term)
signal.signal(signal.SIGINT, intr)
print("trapping", flush=True)
while True:
    time.sleep(0.05)
"""


def test_sigterm_is_forwarded_and_the_childs_code_returned(tmp_path: Path) -> None:
    run = _Launcher(tmp_path, _child(tmp_path, TRAPS))
    run.wait_for("trapping")
    run.proc.send_signal(signal.SIGTERM)
    code, result = run.finish()
    assert code == 143 and result["exit_code"] == 143 and result["signal"] is None
    assert result["forwarded"] == [signal.SIGTERM] and result["tail"] == ["trapping", "got TERM"]


def test_a_second_sigint_kills_the_child(tmp_path: Path) -> None:
    run = _Launcher(tmp_path, _child(tmp_path, TRAPS))
    run.wait_for("trapping")
    run.proc.send_signal(signal.SIGINT)
    run.wait_for("got INT")  # the first one reached the child, once
    run.proc.send_signal(signal.SIGINT)
    code, result = run.finish()
    assert code == 128 + signal.SIGKILL and result["signal"] == signal.SIGKILL and result["killed"]
    assert result["forwarded"] == [signal.SIGINT, signal.SIGKILL]
    assert result["tail"].count("got INT") == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGSEGV])
def test_a_signal_death_is_128_plus_the_signal(tmp_path: Path, sig: int) -> None:
    argv = _child(
        tmp_path,
        f"import os, signal\nsignal.signal({int(sig)}, signal.SIG_DFL)\n"
        f"os.kill(os.getpid(), {int(sig)})\n",
    )
    o, e, _, _ = _fds(tmp_path)
    res = launch(argv, stdout_fd=o, stderr_fd=e, use_pty=False)
    os.close(o), os.close(e)
    assert (res.exit_code, res.signal, res.forwarded) == (128 + sig, sig, [])


def test_signals_are_forwarded_after_the_child_closed_its_output(tmp_path: Path) -> None:
    quiet = (
        TRAPS.replace('print("got TERM", flush=True); sys.exit(143)', "os._exit(143)")
        .replace(
            'print("trapping", flush=True)\n',
            'print("trapping", flush=True)\nos.close(1)\nos.close(2)\n',
        )
        .replace("import signal, sys, time", "import os, signal, sys, time")
    )
    run = _Launcher(tmp_path, _child(tmp_path, quiet))
    run.wait_for("trapping")
    time.sleep(0.3)  # let the launcher see both streams end (only what it then does is asserted)
    assert run.proc.poll() is None
    run.proc.send_signal(signal.SIGTERM)
    code, result = run.finish()
    assert code == 143 and result["forwarded"] == [signal.SIGTERM]
