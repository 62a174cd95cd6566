"""Tests of log cleaning (``service.engine.logparse.text``)."""

from __future__ import annotations

from service.engine.logparse.parse import parse_log
from service.engine.logparse.text import clean_log


def test_clean_log_strips_prefixes_and_keeps_traceback_indentation() -> None:
    text = (
        "\x1b[32m[2026-03-23 14:01:38 TP0]\x1b[0m Scheduler hit an exception: Traceback (most recent call last):\r\n"
        '[2026-03-23 14:01:38 TP0]   File "/x/sglang/srt/managers/scheduler.py", line 10, in run\r\n'
        "[2026-03-23 14:01:38 TP0]     self.step()\r\n"
        "2026-03-23T14:01:38.123456789Z     assert x\r"
        "Mar 23 14:01:38 gpu-host python[1234]: RuntimeError: boom\n"
        "[pod/sglang-abc/sglang] plain\n"
    )
    assert clean_log(text) == [
        "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/managers/scheduler.py", line 10, in run',
        "    self.step()",
        "    assert x",
        "RuntimeError: boom",
        "plain",
    ]


def test_clean_log_docker_compose_prefix_only_when_consistent() -> None:
    text = (
        "sglang-1  | Traceback (most recent call last):\n"
        'sglang-1  |   File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 7, in f\n'
        "sglang-1  |     raise ValueError('x')\n"
        "sglang-1  | ValueError: x\n"
        "router_1  | ready\n"
        "router_1  | ok\n"
    )
    lines = clean_log(text)
    assert (
        lines[1] == '  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 7, in f'
    )
    assert lines[4:] == ["ready", "ok"]
    # a single "a | b" in prose is not a compose prefix
    assert clean_log("one | two\nthree\nfour\nfive") == ["one | two", "three", "four", "five"]
    parsed = parse_log(text)
    assert parsed.primary is not None and parsed.primary.message == "x"
    assert parsed.primary.frames[0].package_path == "sglang/srt/server_args.py"


def test_kubectl_timestamps_and_ansi_colours() -> None:
    text = (
        "[pod/sglang-0/sglang] 2026-03-23T14:01:38.000Z Traceback (most recent call last):\n"
        '[pod/sglang-0/sglang] 2026-03-23T14:01:38.000Z   File "/usr/lib/python3.11/site-packages/'
        'sglang/srt/model_executor/model_runner.py", line 300, in init\n'
        "[pod/sglang-0/sglang] 2026-03-23T14:01:38.000Z     raise RuntimeError(msg)\n"
        "[pod/sglang-0/sglang] 2026-03-23T14:01:38.000Z \x1b[1;31mRuntimeError\x1b[0m: CUDA out of memory\n"
    )
    parsed = parse_log(text)
    exc = parsed.primary
    assert exc is not None and exc.type == "RuntimeError" and exc.message == "CUDA out of memory"
    assert exc.frames[0].source == "raise RuntimeError(msg)"
    assert parsed.python_version == "3.11"
