"""Tests of traceback scanning (``service.engine.logparse.frames``), through
:func:`~service.engine.logparse.parse.parse_log`."""

from __future__ import annotations

import pytest

from service.engine.logparse.frames import package_path
from service.engine.logparse.parse import parse_log
from service.errors import NoCrashFound

CHAINED_LOG = """\
Traceback (most recent call last):
  File "/venv/lib/python3.10/site-packages/sglang/srt/configs/model_config.py", line 80, in load
    cfg = AutoConfig.from_pretrained(path)
KeyError: 'kimi_k2'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/lib/python3.10/site-packages/sglang/srt/configs/model_config.py", line 82, in load
    raise ValueError("unknown model type") from e
ValueError: unknown model type

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/venv/lib/python3.10/site-packages/transformers/utils/hub.py", line 5, in cleanup
    os.remove(tmp)
FileNotFoundError: [Errno 2] No such file or directory: '/tmp/x'
"""


def test_chained_exceptions_and_primary_choice() -> None:
    parsed = parse_log(CHAINED_LOG)
    assert [e.type for e in parsed.exceptions] == ["KeyError", "ValueError", "FileNotFoundError"]
    assert [e.context for e in parsed.exceptions] == [None, "cause", "context"]
    assert [e.start_line for e in parsed.exceptions] == [1, 8, 15]
    # the last exception's innermost frame is in transformers, so the primary is the
    # last one raised inside sglang
    assert parsed.primary == parsed.exceptions[1]
    assert parsed.primary.message == "unknown model type"


def test_primary_falls_back_to_last_exception_without_sglang_frames() -> None:
    text = "AssertionError: first\nsome log line\nRuntimeError: second"
    parsed = parse_log(text)
    assert [e.type for e in parsed.exceptions] == ["AssertionError", "RuntimeError"]
    assert parsed.primary is not None and parsed.primary.message == "second"


def test_scheduler_thread_and_spawn_process_tracebacks() -> None:
    text = """\
[2026-01-01 00:00:00] INFO server.py:1: starting
[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py", line 410, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.

[2026-01-01 00:00:01] Received sigquit from a child process. It usually means the child failed.
Exception in thread Thread-3 (watchdog):
Traceback (most recent call last):
  File "/usr/lib/python3.12/threading.py", line 1073, in _bootstrap_inner
    self.run()
KeyboardInterrupt
Process SpawnProcess-1:
Traceback (most recent call last):
  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/detokenizer_manager.py", line 50, in run_detokenizer_process
    manager.event_loop()
zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:30000')
"""
    parsed = parse_log(text)
    types = [(e.type, e.qualified_type) for e in parsed.exceptions]
    assert types == [
        ("RuntimeError", "RuntimeError"),
        ("KeyboardInterrupt", "KeyboardInterrupt"),
        ("ZMQError", "zmq.error.ZMQError"),
    ]
    first = parsed.exceptions[0]
    assert first.start_line == 2
    assert first.message == "Not enough memory. Please try to increase --mem-fraction-static."
    assert first.frames[-1].source == "raise RuntimeError("
    assert parsed.exceptions[1].bare
    assert parsed.primary == parsed.exceptions[2]
    assert parsed.primary.frames[-1].function == "run_detokenizer_process"


def test_headerless_cut_log_frames_are_still_parsed() -> None:
    text = """\
some earlier output
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", line 3598, in _handle_speculative_decoding
    assert (
AssertionError
"""
    parsed = parse_log(text)
    exc = parsed.primary
    assert exc is not None and exc.bare and exc.start_line == 2
    assert exc.frames[0].package_path == "sglang/srt/server_args.py"
    assert exc.frames[0].source == "assert ("


def test_frames_without_exception_line_are_kept() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/site-packages/sglang/launch_server.py", line 10, in <module>\n'
        "    main()\n"
    )
    parsed = parse_log(text)
    assert parsed.primary is not None
    assert parsed.primary.type == "<unknown>" and parsed.primary.bare
    assert parsed.primary.frames[0].package_path == "sglang/launch_server.py"
    assert any("without an exception line" in n for n in parsed.notes)


def test_elision_markers_and_repeated_lines() -> None:
    text = """\
Traceback (most recent call last):
  File "/a/sglang/srt/a.py", line 1, in f
    g()
[Previous line repeated 996 more times]
  File "/a/sglang/srt/b.py", line 2, in g
    h()
...
  File "/a/sglang/srt/c.py", line 3, in h
    ~~~~^^^
RecursionError: maximum recursion depth exceeded
"""
    exc = parse_log(text).primary
    assert exc is not None
    assert [f.elided_before for f in exc.frames] == [False, True, True]
    assert exc.frames[2].source is None  # "~~~~^^^" is a marker, not source
    assert exc.message == "maximum recursion depth exceeded"


def test_caret_lines_and_multiline_source() -> None:
    text = """\
Traceback (most recent call last):
  File "/srv/sglang/python/sglang/srt/server_args.py", line 3596, in _handle_speculative_decoding
    assert (
        self.speculative_eagle_topk is None
    ), "topk must be unset"
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AssertionError: topk must be unset
"""
    exc = parse_log(text).primary
    assert exc is not None
    assert exc.frames[0].package_path == "sglang/srt/server_args.py"
    assert exc.frames[0].source == (
        'assert (\nself.speculative_eagle_topk is None\n), "topk must be unset"'
    )


def test_qualified_names_and_multiline_messages() -> None:
    text = """\
Traceback (most recent call last):
  File "/usr/lib/python3.12/argparse.py", line 2000, in parse
    raise ArgumentError(action, msg)
argparse.ArgumentError: argument --tp-size: invalid int value: 'x'
Traceback (most recent call last):
  File "/x/site-packages/sglang/srt/custom.py", line 1, in f
    raise CustomError(text)
sglang.srt.x.CustomError: first line
  second line of the message
third line
[2026-01-01 00:00:00] INFO this is a log record, not the message
pydantic_core._pydantic_core.ValidationError: 1 validation error for Config
tp_size
  Input should be a valid integer

unrelated trailing line
"""
    parsed = parse_log(text)
    first, second, third = parsed.exceptions
    assert (first.type, first.qualified_type) == ("ArgumentError", "argparse.ArgumentError")
    assert first.message == "argument --tp-size: invalid int value: 'x'"
    assert (second.type, second.qualified_type) == ("CustomError", "sglang.srt.x.CustomError")
    assert second.message == "first line\n  second line of the message\nthird line"
    assert third.type == "ValidationError" and third.frames == []
    assert third.message == (
        "1 validation error for Config\ntp_size\n  Input should be a valid integer"
    )
    assert parsed.primary == second


def test_bare_exception_does_not_swallow_following_lines() -> None:
    parsed = parse_log("AssertionError\nsome trailing words\n")
    assert parsed.primary is not None
    assert parsed.primary.bare and parsed.primary.message is None


def test_log_levels_and_prose_are_not_exceptions() -> None:
    text = "WARNING: something\nERROR: other\nError: generic\nUserWarning: careful\nNote: hi\n"
    with pytest.raises(NoCrashFound):
        parse_log(text)


def test_exception_group_members_are_separate_exceptions() -> None:
    text = """\
  + Exception Group Traceback (most recent call last):
  |   File "/usr/lib/python3.12/asyncio/taskgroups.py", line 145, in __aexit__
  |     raise me from None
  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "/x/site-packages/sglang/srt/entrypoints/engine.py", line 9, in start
    |     raise RuntimeError("rank 3 died")
    | RuntimeError: rank 3 died
    +------------------------------------
"""
    parsed = parse_log(text)
    group, member = parsed.exceptions
    assert group.type == "ExceptionGroup"
    assert group.message == "unhandled errors in a TaskGroup (1 sub-exception)"
    assert group.frames[0].source == "raise me from None"
    assert (member.type, member.message) == ("RuntimeError", "rank 3 died")
    assert member.frames[0].package_path == "sglang/srt/entrypoints/engine.py"
    assert parsed.primary == member


def test_package_path_variants() -> None:
    assert package_path("/usr/lib/python3.12/site-packages/sglang/srt/server_args.py") == (
        "sglang/srt/server_args.py"
    )
    assert package_path(".../sglang/srt/server_args.py") == "sglang/srt/server_args.py"
    assert package_path("/sgl-workspace/sglang/python/sglang/launch_server.py") == (
        "sglang/launch_server.py"
    )
    assert package_path("/home/me/sglang/sglang/srt/x.py") == "sglang/srt/x.py"
    assert package_path("<frozen runpy>") is None
    assert package_path("<string>") is None
    assert package_path("/x/site-packages/sglang_router/launch.py") is None
    assert package_path("/x/site-packages/sgl_kernel/ops.py") is None
