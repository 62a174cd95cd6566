"""The per-line prefix vocabulary the log reader and ``watch`` share."""

from __future__ import annotations

import pytest

from service.engine.logparse.prefixes import bare_rank, line_prefix, source_column, strip_ansi


@pytest.mark.parametrize(
    ("line", "kind", "source", "rest"),
    [
        ("May 02 10:14:03 gpu-1 python3[1234]: File x", "journald", None, "File x"),
        ("2026-05-02T10:14:03+0000 gpu-1 sglang[77]: boom", "journald", None, "boom"),
        ("2026-05-02T10:14:03.5Z INFO foo: bar", "timestamp", None, "INFO foo: bar"),
        ("[pod/sglang-0/server] x", "kubectl", None, "x"),
        ("[rank3]: Traceback", "rank", "rank:3", "Traceback"),
        ("[default1]: x", "rank", "rank:1", "x"),
        ("(SGLangWorker pid=42, ip=10.0.0.1) x", "rank", "pid:42", "x"),
        ("INFO [worker_0] 2: x", "launcher", "worker_0:2", "x"),
        ("ERROR 3: x", "launcher", "rank:3", "x"),
        (
            '[12/03/26 10:11:12] INFO       File "a.py", line 1',
            "launcher",
            None,
            '  File "a.py", line 1',
        ),
        ("[12/03/26 10:11:12] WARNING  boom", "launcher", None, "boom"),
    ],
)
def test_each_prefix_kind_is_read_with_its_source(
    line: str, kind: str, source: str | None, rest: str
) -> None:
    found = line_prefix(line)
    assert found is not None and found.kind == kind and found.source == source
    assert line[found.end :] == rest


def test_opt_in_prefixes_need_the_callers_word() -> None:
    assert line_prefix("0: x") is None and bare_rank("0: x")
    assert line_prefix("0: x", rank=True).source == "rank:0"  # type: ignore[union-attr]
    ts = "[2026-03-23 14:01:38 TP0] Scheduler hit an exception"
    assert line_prefix(ts) is None
    assert line_prefix(ts, sglang_ts=True).kind == "sglang"  # type: ignore[union-attr]
    assert line_prefix("svc-1  | x") is None
    found = line_prefix("svc-1  | x", compose={"svc-1"}.__contains__)
    assert found is not None and found.source == "svc:svc-1" and "svc-1  | x"[found.end :] == "x"


def test_indentation_is_never_a_prefix() -> None:
    assert line_prefix('  File "a.py", line 1, in f') is None
    assert line_prefix("\t0: x", rank=True) is None


def test_the_launcher_column_and_ansi() -> None:
    line = "ValueError: bad value                 launcher.py:123"
    assert line[: source_column(line)] == "ValueError: bad value"  # type: ignore[misc]
    assert source_column("a b.py:1") is None  # one blank: part of the text
    assert strip_ansi("\x1b[31mred\x1b[0m") == "red"


def test_a_rich_handler_log_reads_as_the_plain_log() -> None:
    from service.engine import parse_log

    plain = [
        "Traceback (most recent call last):",
        '  File "/x/sglang/srt/server_args.py", line 12, in __post_init__',
        "    assert self.tp_size > 0",
        "AssertionError: tp must be positive",
    ]
    rich = "\n".join(
        f"[12/03/26 10:11:{12 + k:02d}] ERROR    {line:<100}  launcher.py:123"
        for k, line in enumerate(plain)
    )
    got = parse_log(rich)
    assert got.primary is not None and got.primary.message == "tp must be positive"
    assert [(f.path, f.line) for f in got.primary.frames] == [("/x/sglang/srt/server_args.py", 12)]
