"""``watch``'s line sources: bounded, binary-safe reading; files followed through rotation;
the journald/docker/kubectl clients (fake clients on PATH that print a recorded stream: this
machine has the real ones but no journal, daemon or cluster)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from service.watch.stream import (
    CHUNK,
    MAX_LINE_BYTES,
    ClientSource,
    LineSplitter,
    SourceError,
    client_command,
    fd_lines,
    file_lines,
)

STREAMS = Path(__file__).parent / "streams"


def _wait(cond: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Poll ``cond`` (bounded, never asserted on): the test fails if it never holds."""
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def test_splitter_joins_chunks_and_reads_line_ends_like_a_terminal() -> None:
    split = LineSplitter()
    got = split.feed(b"first li") + split.feed(b"ne\r\nsecond\nLoading 10%\rLoading 100%\nta")
    got += split.feed(b"il") + split.finish()
    assert got == ["first line", "second", "Loading 100%", "tail"]
    assert split.buffered == 0


def test_splitter_drops_nul_and_controls_and_replaces_invalid_utf8() -> None:
    split = LineSplitter()
    got = split.feed(b"a\x00b\x07c\t\x1b[31mred\x1b[0m \xff\xfe ok\n")
    assert got == ["abc\t\x1b[31mred\x1b[0m \ufffd\ufffd ok"]


def test_a_long_line_is_cut_and_the_rest_skipped_without_holding_it() -> None:
    split = LineSplitter(max_line=100)
    peak = 0
    got: list[str] = []
    for _ in range(50):  # a 50,000-byte line in 1,000-byte chunks
        got += split.feed(b"x" * 1000)
        peak = max(peak, split.buffered)
    got += split.feed(b"yyy\nAssertionError\n")
    assert got == ["x" * 100, "AssertionError"]
    assert peak == 100 and split.cut == 1


def test_a_50_mb_line_from_a_real_pipe_costs_about_one_chunk() -> None:
    code = (
        "import sys; w = sys.stdout.buffer.write\n"
        "for _ in range(800): w(b'z' * 65536)\n"  # 52 MB without a newline
        "w(b'\\nTraceback (most recent call last):\\nAssertionError\\n')"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    split = LineSplitter()
    tracemalloc.start()
    try:
        lines = list(fd_lines(proc.stdout.fileno(), splitter=split))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        proc.stdout.close()
        proc.wait()
    assert [len(line) for line in lines] == [MAX_LINE_BYTES, 34, 14]
    assert lines[1:] == ["Traceback (most recent call last):", "AssertionError"]
    assert split.cut == 1
    assert peak < 8 * (CHUNK + MAX_LINE_BYTES), peak  # 52 MB went by, a few chunks were held


def test_binary_garbage_never_raises() -> None:
    rng = random.Random(29)
    split = LineSplitter(max_line=4096)
    lines: list[str] = []
    for _ in range(200):
        lines += split.feed(rng.randbytes(rng.randrange(1, 20_000)))
    lines += split.finish()
    assert lines and all(len(line) <= 4096 for line in lines)
    assert not any("\x00" in line or "\n" in line for line in lines)


def test_file_without_follow_reads_to_the_end(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_bytes(b"one\ntwo\nthree")
    assert list(file_lines(log, follow=False)) == ["one", "two", "three"]
    with pytest.raises(SourceError, match="cannot read"):
        list(file_lines(tmp_path / "missing.log", follow=False))


def test_following_a_file_through_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_text("a1\n")
    got: list[str | None] = []
    stop = threading.Event()

    def follow() -> None:
        for line in file_lines(log, follow=True, poll_s=0.01, idle_s=0.05, stop=stop.is_set):
            got.append(line)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        _wait(lambda: "a1" in got, "the first line")
        with log.open("a") as f:
            f.write("a2\npartial")  # a line still being written when the file rotates
        _wait(lambda: "a2" in got, "an appended line")
        _wait(lambda: None in got, "an idle tick while the file is quiet")
        os.rename(log, tmp_path / "sglang.log.1")  # logrotate: rename, then create
        log.write_text("b1\n" + "b" * 500 + "\n")
        _wait(lambda: "b1" in got, "the first line of the new file")
        with log.open("r+") as f:  # copytruncate: the same inode, cut to nothing, rewritten
            f.truncate(0)
        with log.open("a") as f:
            f.write("c1\n")
        _wait(lambda: "c1" in got, "the first line after truncation")
    finally:
        stop.set()
        reader.join(timeout=30)
    lines = [line for line in got if line is not None]
    assert lines == ["a1", "a2", "partial", "b1", "b" * 500, "c1"]
    assert not reader.is_alive()


# ------------------------------------------------------------------------ log clients

FAKE_CLIENT = """#!/bin/sh
# a stand-in for {name}: records its argv, prints a recorded stream ({where})
printf '%s\\n' "$@" > "$WATCH_ARGV_DIR/{name}.argv"
cat "$WATCH_STREAM" {redirect}
exit "${{WATCH_EXIT:-0}}"
"""


@pytest.fixture()
def fake_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``journalctl``, ``kubectl`` (stdout) and ``docker`` (stderr, as ``docker logs``
    relays a container's stderr) on PATH, each printing ``$WATCH_STREAM``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, redirect in (("journalctl", ""), ("kubectl", ""), ("docker", ">&2")):
        script = bin_dir / name
        script.write_text(
            FAKE_CLIENT.format(
                name=name, redirect=redirect, where="stderr" if redirect else "stdout"
            )
        )
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("WATCH_ARGV_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("kind", "name", "stream"),
    [
        ("journald", "sglang", "loop_journald_iso.log"),
        ("docker", "sglang-1", "seed_journald.log"),
        ("kubectl", "sglang-7d9f8c6b5-x2k4q", "loop_kubectl.log"),
    ],
)
def test_clients_stream_a_recorded_log(
    fake_clients: Path, monkeypatch: pytest.MonkeyPatch, kind: str, name: str, stream: str
) -> None:
    monkeypatch.setenv("WATCH_STREAM", str(STREAMS / stream))
    source = ClientSource(kind, name, follow=True, idle_s=5.0)
    lines = [line for line in source if line is not None]
    assert lines == (STREAMS / stream).read_text().splitlines()
    argv = (fake_clients / f"{source.argv[0]}.argv").read_text().splitlines()
    assert argv == client_command(kind, name, follow=True)[1:]
    assert source.returncode == 0 and source.error is None


def test_client_commands() -> None:
    assert client_command("journald", "sglang", follow=True) == [
        "journalctl",
        "-o",
        "short-iso",
        "-fu",
        "sglang",
    ]
    assert client_command("docker", "c", follow=True) == ["docker", "logs", "-f", "c"]
    assert client_command("kubectl", "p", follow=False) == ["kubectl", "logs", "p"]
    assert "-f" not in " ".join(client_command("journald", "sglang", follow=False))


def test_a_failing_client_says_why(fake_clients: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = fake_clients / "no-journal.txt"
    bad.write_text("")
    (fake_clients / "bin" / "journalctl").write_text(
        "#!/bin/sh\necho 'No journal files were found.' >&2\nexit 1\n"
    )
    monkeypatch.setenv("WATCH_STREAM", str(bad))
    source = ClientSource("journald", "sglang", follow=False)
    assert list(source) == []
    assert source.returncode == 1
    assert source.error is not None and "No journal files were found." in source.error


def test_a_missing_client_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no client at all
    for kind in ("journald", "docker", "kubectl"):
        with pytest.raises(SourceError, match="not installed or not on PATH"):
            ClientSource(kind, "x", follow=True)
