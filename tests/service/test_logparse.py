"""Tests of the crash-log parser (``sglang_triage.service.logparse``).

The public examples are copied verbatim from ``shared/incidents/public_examples.jsonl``
so that the tests never read outside the repository.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_triage.errors import (
    BinaryInput,
    EmptyInput,
    InputTooLarge,
    LogParseError,
    NoCrashFound,
)
from sglang_triage.service.logparse import (
    ParsedLog,
    clean_log,
    package_path,
    parse_bytes,
    parse_input,
    parse_log,
)

# --------------------------------------------------------------------------- public examples

SGLANG_38236_LOG = (
    '  File ".../sglang/srt/server_args.py", line 5689, in _handle_model_specific_adjustments\n'
    "    apply_deepseek_v4_defaults(self, model_arch)\n"
    '  File ".../sglang/srt/arg_groups/deepseek_v4_hook.py", line 150, in apply_deepseek_v4_defaults\n'
    "    assert server_args.speculative_algorithm in (\n"
    "AssertionError: Only EAGLE and DSPARK speculative algorithms are supported for "
    "DeepseekV4ForCausalLM"
)
SGLANG_38236_COMMAND = (
    "python -m sglang.launch_server --model-path <DeepSeek-V4-Flash> --tp 2 \\\n"
    "  --speculative-algorithm NEXTN --speculative-num-steps 2 \\\n"
    "  --speculative-eagle-topk 1 --speculative-num-draft-tokens 3"
)
QWEN_108_LOG = (
    "/sgl-workspace/sglang/python/sglang/launch_server.py:51: UserWarning: 'python -m "
    "sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.\n"
    "  Example: sglang serve --model-path <model> [options]\n"
    "  warnings.warn(\n"
    "[2026-03-23 14:01:38] WARNING model_config.py:1098: Transformers version 5.3.0 is used for "
    "model type qwen3_5_moe. If you experience issues related to RoPE parameters, they may be due "
    "to incompatibilities between Transformers >=5.0.0 and some models. You can try downgrading "
    "to transf\n"
    "ormers==4.57.1 as a workaround.\n"
    "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
    '  File "/sgl-workspace/sglang/python/sglang/launch_server.py", line 59,\n'
    "[... remaining frames not visible in the available copy of the issue ...]\n"
    "ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible "
    "with radix cache when using --mamba-scheduler-strategy no_buffer."
)
SGLANG_36840_LOG = (
    "ValueError: When enabling two batch overlap without an EP a2a backend "
    "(moe_a2a_backend='none'),\n"
    "--enable-dp-attention is required (DeepSeek-V4 non-EP DP TBO path)."
)
SGLANG_36840_COMMAND = (
    "--tp-size 4 --context-length 16384 --mem-fraction-static 0.95 --max-running-requests 40 "
    "--moe-runner-backend triton --enable-two-batch-overlap --enable-dp-attention"
)
PR_13421_LOG = "AssertionError: fa3, aiter, triton, or trtllm_mha is required for Llama4 model"
SGLANG_12818_LOG = "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2"
SGLANG_12818_COMMAND = (
    "python -m sglang.launch_server --model-path /moonshotai/Kimi-K2-Thinking --tp 8 "
    "--disable-radix-cache  --trust-remote-code  --tool-call-parser kimi_k2 "
    "--reasoning_parser kimi_k2  --context-length 262144"
)


def test_public_38236_headerless_arg_groups_frames() -> None:
    parsed = parse_log(SGLANG_38236_LOG)
    exc = parsed.primary
    assert exc is not None and parsed.exceptions == [exc]
    assert exc.type == "AssertionError" and not exc.bare
    assert exc.message == (
        "Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM"
    )
    assert [f.package_path for f in exc.frames] == [
        "sglang/srt/server_args.py",
        "sglang/srt/arg_groups/deepseek_v4_hook.py",
    ]
    inner = exc.frames[-1]
    assert (inner.line, inner.function) == (150, "apply_deepseek_v4_defaults")
    assert inner.source == "assert server_args.speculative_algorithm in ("
    assert exc.frames[0].source == "apply_deepseek_v4_defaults(self, model_arch)"
    assert exc.start_line == 1
    assert any("header" in n for n in parsed.notes)


def test_public_38236_structured_command_with_placeholder() -> None:
    parsed, extras = parse_input(
        {
            "log": SGLANG_38236_LOG,
            "command": SGLANG_38236_COMMAND,
            "release": "0.5.19.dev410+gedff717ef",
        }
    )
    assert parsed.command == [
        "--model-path",
        "<DeepSeek-V4-Flash>",
        "--tp",
        "2",
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "3",
    ]
    assert parsed.entrypoint == "python -m sglang.launch_server"
    assert parsed.model == "<DeepSeek-V4-Flash>"
    assert parsed.release_hints[0].kind == "explicit"
    assert parsed.release_hints[0].version == "0.5.19.dev410+gedff717ef"
    assert extras == {"hardware": None, "release": "0.5.19.dev410+gedff717ef"}


def test_public_qwen_108_cut_frames_and_warning_example_is_not_a_command() -> None:
    parsed = parse_log(QWEN_108_LOG)
    assert len(parsed.exceptions) == 1
    exc = parsed.primary
    assert exc is not None
    assert exc.type == "ValueError"
    assert exc.message == (
        "Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with "
        "radix cache when using --mamba-scheduler-strategy no_buffer."
    )
    assert [f.path for f in exc.frames] == [
        "<frozen runpy>",
        "<frozen runpy>",
        "/sgl-workspace/sglang/python/sglang/launch_server.py",
    ]
    assert exc.frames[0].function == "_run_module_as_main" and exc.frames[0].line == 198
    last = exc.frames[-1]
    assert (last.line, last.function, last.package_path) == (59, None, "sglang/launch_server.py")
    assert exc.start_line == 6  # the header, in the cleaned log
    assert any("cut" in n for n in parsed.notes)
    # "Example: sglang serve --model-path <model> [options]" is documentation, not the command.
    assert parsed.command is None and parsed.model is None
    assert parsed.python_version is None


def test_public_36840_message_only_two_lines_and_flags_only_command() -> None:
    parsed, _ = parse_input({"log": SGLANG_36840_LOG, "command": SGLANG_36840_COMMAND})
    exc = parsed.primary
    assert exc is not None and exc.frames == []
    assert exc.type == "ValueError"
    assert exc.message == (
        "When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'),\n"
        "--enable-dp-attention is required (DeepSeek-V4 non-EP DP TBO path)."
    )
    assert parsed.command == SGLANG_36840_COMMAND.split()
    assert parsed.entrypoint is None
    assert parsed.command_text == SGLANG_36840_COMMAND


def test_public_pr13421_message_only_assertion() -> None:
    parsed = parse_log(PR_13421_LOG)
    exc = parsed.primary
    assert exc is not None
    assert (exc.type, exc.bare, exc.frames) == ("AssertionError", False, [])
    assert exc.message == "fa3, aiter, triton, or trtllm_mha is required for Llama4 model"


def test_public_12818_argparse_unrecognized_underscore_flag() -> None:
    parsed, _ = parse_input(
        json.dumps({"log": SGLANG_12818_LOG, "command": SGLANG_12818_COMMAND, "release": "0.5.5"})
    )
    assert parsed.exceptions == [] and parsed.primary is None
    err = parsed.argparse_error
    assert err is not None
    assert err.prog == "launch_server.py"
    assert err.kind == "unrecognized_arguments"
    assert err.flags == ["--reasoning_parser"]
    assert err.values == ["kimi_k2"]
    assert err.usage is None
    assert parsed.model == "/moonshotai/Kimi-K2-Thinking"
    assert parsed.command is not None and "--reasoning_parser" in parsed.command
    assert [h.version for h in parsed.release_hints] == ["0.5.5"]


# --------------------------------------------------------------------------- the seed case

SEED_LOG = """\
root@ct200:~# python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 \\
    --trust-remote-code \\
    --speculative-algorithm EAGLE3 \\
    --speculative-draft-model-path /models/Kimi-K2.6-eagle3 \\
    --speculative-eagle-topk 4 --speculative-num-draft-tokens 8
[2026-04-20 10:12:01] INFO utils.py:148: Note: NumExpr detected 96 cores.
[2026-04-20 10:12:02] WARNING server_args.py:1187: Overlap scheduler is disabled for EAGLE3.
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "/root/venv_sglang211/lib/python3.12/site-packages/sglang/launch_server.py", line 24, in <module>
    server_args = prepare_server_args(sys.argv[1:])
                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/root/venv_sglang211/lib/python3.12/site-packages/sglang/srt/server_args.py", line 4467, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/root/venv_sglang211/lib/python3.12/site-packages/sglang/srt/server_args.py", line 4046, in from_cli_args
    return cls(**{attr: getattr(args, attr) for attr in attrs})
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<string>", line 352, in __init__
  File "/root/venv_sglang211/lib/python3.12/site-packages/sglang/srt/server_args.py", line 655, in __post_init__
    self._handle_speculative_decoding()
  File "/root/venv_sglang211/lib/python3.12/site-packages/sglang/srt/server_args.py", line 3598, in _handle_speculative_decoding
    assert (
           ^
AssertionError
[2026-04-20 10:12:03] Exiting: the server failed to start.
"""

SEED_ARGV = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/Kimi-K2.6-eagle3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]


def test_seed_case() -> None:
    parsed = parse_log(SEED_LOG)
    assert parsed.python_version == "3.12"
    exc = parsed.primary
    assert exc is not None
    assert exc.type == "AssertionError" and exc.bare and exc.message is None
    assert exc.start_line == 8
    assert [f.function for f in exc.frames] == [
        "_run_module_as_main",
        "_run_code",
        "<module>",
        "prepare_server_args",
        "from_cli_args",
        "__init__",
        "__post_init__",
        "_handle_speculative_decoding",
    ]
    inner = exc.frames[-1]
    assert inner.package_path == "sglang/srt/server_args.py"
    assert (inner.line, inner.function) == (3598, "_handle_speculative_decoding")
    assert inner.source == "assert ("  # the caret line is not source
    init = exc.frames[5]
    assert (init.path, init.line, init.source, init.package_path) == ("<string>", 352, None, None)
    assert exc.frames[2].source == "server_args = prepare_server_args(sys.argv[1:])"
    assert exc.frames[2].package_path == "sglang/launch_server.py"
    assert parsed.command == SEED_ARGV
    assert parsed.entrypoint == "python3 -m sglang.launch_server"
    assert parsed.command_text is not None and "\\" not in parsed.command_text
    assert parsed.model == "/models/Kimi-K2.6"
    assert parsed.notes == []
    # the whole result is JSON-serialisable and round-trips
    assert ParsedLog.model_validate_json(parsed.model_dump_json()) == parsed


# --------------------------------------------------------------------------- cleaning


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


# --------------------------------------------------------------------------- tracebacks


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


# --------------------------------------------------------------------------- argparse


USAGE = """\
usage: launch_server.py [-h] --model-path MODEL_PATH
                        [--tokenizer-path TOKENIZER_PATH]
                        [--attention-backend {fa3,flashinfer,triton}]
                        [--tp-size TP_SIZE]
"""


@pytest.mark.parametrize(
    ("line", "kind", "flags", "values", "choices"),
    [
        (
            "launch_server.py: error: argument --attention-backend: invalid choice: 'fa4' "
            "(choose from 'fa3', 'flashinfer', 'triton')",
            "invalid_choice",
            ["--attention-backend"],
            ["fa4"],
            ["fa3", "flashinfer", "triton"],
        ),
        (
            "launch_server.py: error: argument --attention-backend: invalid choice: 'fa4' "
            "(choose from fa3, flashinfer, triton)",
            "invalid_choice",
            ["--attention-backend"],
            ["fa4"],
            ["fa3", "flashinfer", "triton"],
        ),
        (
            "launch_server.py: error: argument --tp-size/--tp: invalid int value: 'eight'",
            "invalid_value",
            ["--tp-size", "--tp"],
            ["eight"],
            None,
        ),
        (
            "launch_server.py: error: the following arguments are required: --model-path",
            "required",
            ["--model-path"],
            [],
            None,
        ),
        (
            "launch_server.py: error: argument --foo: expected one argument",
            "expected_argument",
            ["--foo"],
            [],
            None,
        ),
        (
            "launch_server.py: error: ambiguous option: --spec could match "
            "--speculative-algorithm, --speculative-num-steps",
            "ambiguous",
            ["--spec", "--speculative-algorithm", "--speculative-num-steps"],
            [],
            ["--speculative-algorithm", "--speculative-num-steps"],
        ),
        (
            "launch_server.py: error: unrecognized arguments: --foo=1 bar --baz",
            "unrecognized_arguments",
            ["--foo", "--baz"],
            ["1", "bar"],
            None,
        ),
    ],
)
@pytest.mark.parametrize("with_usage", [True, False])
def test_argparse_errors(
    line: str,
    kind: str,
    flags: list[str],
    values: list[str],
    choices: list[str] | None,
    with_usage: bool,
) -> None:
    text = (USAGE if with_usage else "[2026-01-01 00:00:00] INFO booting\n") + line + "\n"
    err = parse_log(text).argparse_error
    assert err is not None
    assert (err.prog, err.kind, err.flags, err.values, err.choices) == (
        "launch_server.py",
        kind,
        flags,
        values,
        choices,
    )
    assert err.message == line.split(": error: ", 1)[1]
    if with_usage:
        assert err.usage is not None and err.usage.startswith("usage: launch_server.py [-h]")
        assert "[--tp-size TP_SIZE]" in err.usage
    else:
        assert err.usage is None


def test_argparse_other_error_needs_usage() -> None:
    other = "launch_server.py: error: argument --x: not allowed with argument --y"
    err = parse_log(USAGE + other).argparse_error
    assert err is not None and err.kind == "other" and err.flags == ["--x", "--y"]
    with pytest.raises(NoCrashFound):
        parse_log("something: error: this is not argparse")


# --------------------------------------------------------------------------- commands


def _command(text: str) -> ParsedLog:
    return parse_log(text + "\nRuntimeError: boom\n")


@pytest.mark.parametrize(
    ("text", "argv", "entrypoint"),
    [
        (
            "$ python -m sglang.launch_server --model-path m --tp 8",
            ["--model-path", "m", "--tp", "8"],
            "python -m sglang.launch_server",
        ),
        (
            "CUDA_VISIBLE_DEVICES=0,1 /usr/bin/python3 -u -m sglang.launch_server --model m --tp 2 > log.txt 2>&1 &",
            ["--model", "m", "--tp", "2"],
            "python3 -m sglang.launch_server",
        ),
        (
            "nohup python3 -m sglang.launch_server --model-path m --port 30000 >> out.log 2>&1 &",
            ["--model-path", "m", "--port", "30000"],
            "nohup python3 -m sglang.launch_server",
        ),
        (
            "sglang serve --model-path m --tp-size 2",
            ["--model-path", "m", "--tp-size", "2"],
            "sglang serve",
        ),
        (
            "torchrun --nproc_per_node 8 -m sglang.launch_server --model-path m",
            ["--model-path", "m"],
            "torchrun -m sglang.launch_server",
        ),
        (
            "docker run --gpus all --shm-size 32g -p 30000:30000 -e SGLANG_ENABLE_SPEC_V2=1 "
            "-v /models:/models --ipc=host lmsysorg/sglang:latest python3 -m sglang.launch_server "
            "--model-path /models/m --host 0.0.0.0",
            ["--model-path", "/models/m", "--host", "0.0.0.0"],
            "docker run … python3 -m sglang.launch_server",
        ),
        (
            "python3 /sgl-workspace/sglang/python/sglang/launch_server.py --model-path m",
            ["--model-path", "m"],
            "python3 /sgl-workspace/sglang/python/sglang/launch_server.py",
        ),
    ],
)
def test_command_forms(text: str, argv: list[str], entrypoint: str) -> None:
    parsed = _command(text)
    assert parsed.command == argv
    assert parsed.entrypoint == entrypoint
    assert parsed.model == "m" or parsed.model == "/models/m"


def test_command_continuations_with_log_prefixes() -> None:
    text = (
        "sglang-1  | + python3 -m sglang.launch_server \\\n"
        "sglang-1  |     --model-path Qwen/Qwen3-8B \\\n"
        "sglang-1  |     --reasoning-parser 'qwen3' \\\n"
        "sglang-1  |     --tp 2\n"
        "sglang-1  | ValueError: bad\n"
    )
    parsed = parse_log(text)
    assert parsed.command == [
        "--model-path",
        "Qwen/Qwen3-8B",
        "--reasoning-parser",
        "qwen3",
        "--tp",
        "2",
    ]
    assert parsed.command_text == (
        "+ python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --reasoning-parser 'qwen3' --tp 2"
    )
    assert parsed.model == "Qwen/Qwen3-8B"


def test_command_continuations_with_timestamp_prefixes_and_sh_c() -> None:
    parsed = _command(
        "[2026-01-01 00:00:00] + python3 -m sglang.launch_server --model-path m \\\n"
        "[2026-01-01 00:00:00]     --tp 8 \\\n"
        "[2026-01-01 00:00:00]     --speculative-algorithm EAGLE3"
    )
    assert parsed.command == ["--model-path", "m", "--tp", "8", "--speculative-algorithm", "EAGLE3"]
    shell = _command(
        'docker run --gpus all img /bin/bash -c "python3 -m sglang.launch_server --model-path x'
        ' --tp 2 && echo done"'
    )
    assert shell.command == ["--model-path", "x", "--tp", "2"]
    assert shell.entrypoint == "docker run … python3 -m sglang.launch_server"
    # a quoted mention in prose is not a command
    prose = _command("UserWarning: 'python -m sglang.launch_server --tp 8' is still supported")
    assert prose.command is None


def test_k8s_manifest_block_lists_and_env() -> None:
    text = """\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
      - name: sglang
        image: lmsysorg/sglang:v0.5.11-cu129
        command:
        - python3
        - -m
        - sglang.launch_server
        args:
        - --model-path
        - "deepseek-ai/DeepSeek-V3"
        - --tp
        - '8'
        env:
        - name: SGLANG_ENABLE_JIT_DEEPGEMM
          value: "0"
        - name: CUDA_VISIBLE_DEVICES
          value: 0,1,2,3,4,5,6,7
---
RuntimeError: boom
"""
    parsed = parse_log(text)
    assert parsed.command == ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8"]
    assert parsed.entrypoint == "python3 -m sglang.launch_server"
    assert parsed.model == "deepseek-ai/DeepSeek-V3"
    assert parsed.env == {
        "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    }
    assert [(h.version, h.kind) for h in parsed.release_hints] == [("0.5.11", "version_string")]


def test_yaml_and_json_flow_lists() -> None:
    yaml_args = _command('    args: ["--model-path", "x", "--tp", "8"]')
    assert yaml_args.command == ["--model-path", "x", "--tp", "8"]
    assert yaml_args.entrypoint == "container args list"
    compose = _command(
        "    command: ['python3', '-m', 'sglang.launch_server', '--model-path', 'x',\n"
        "              '--tp', '4']\n"
        "    environment:\n"
        "      SGLANG_USE_MODELSCOPE: 'true'\n"
        "      - SGLANG_DISABLE_CUDNN_CHECK=1\n"
    )
    assert compose.command == ["--model-path", "x", "--tp", "4"]
    assert compose.env == {"SGLANG_USE_MODELSCOPE": "true", "SGLANG_DISABLE_CUDNN_CHECK": "1"}
    as_json = _command(
        '{"command": ["/bin/sh", "-c", "python3 -m sglang.launch_server --model-path x --tp 2"],\n'
        ' "env": {"SGLANG_A": "1", "SGLANG_B": 2}}'
    )
    assert as_json.command == ["--model-path", "x", "--tp", "2"]
    assert as_json.env == {"SGLANG_A": "1", "SGLANG_B": "2"}
    folded = _command(
        "command: >\n  python3 -m sglang.launch_server\n  --model-path x\n  --tp 2\nports: []"
    )
    assert folded.command == ["--model-path", "x", "--tp", "2"]


def test_env_forms() -> None:
    parsed = _command(
        "export SGLANG_ENABLE_SPEC_V2=1\n"
        'SGLANG_X="a b" CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server --model-path m\n'
        "MY_SGLANG_Y=2 echo $SGLANG_Z=3\n"
    )
    assert parsed.env == {
        "SGLANG_ENABLE_SPEC_V2": "1",
        "SGLANG_X": "a b",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }


def test_last_command_wins() -> None:
    parsed = _command(
        "python -m sglang.launch_server --model-path a\npython -m sglang.launch_server --model-path b"
    )
    assert parsed.model == "b"
    assert any("2 launch commands" in n for n in parsed.notes)


def test_server_args_line() -> None:
    line = (
        "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/models/x', tp_size=8, "
        "speculative_eagle_topk=None, trust_remote_code=True, mem_fraction_static=0.85, "
        "json_model_override_args='{}', cuda_graph_bs=[1, 2, 4], lora_paths={'a': (1, 2)}, "
        "load_format=<LoadFormat.AUTO: 'auto'>, weird=x(1, 2), flag=False)"
    )
    parsed = _command(line)
    assert parsed.server_args == {
        "model_path": "/models/x",
        "tp_size": 8,
        "speculative_eagle_topk": None,
        "trust_remote_code": True,
        "mem_fraction_static": 0.85,
        "json_model_override_args": "{}",
        "cuda_graph_bs": [1, 2, 4],
        "lora_paths": {"a": [1, 2]},
        "load_format": "<LoadFormat.AUTO: 'auto'>",
        "weird": "x(1, 2)",
        "flag": False,
    }
    assert parsed.model == "/models/x"  # from server_args, no command found
    cut = _command("server_args=ServerArgs(model_path='m', tp_size=2, cuda_graph_bs=[1, 2")
    assert cut.server_args == {"model_path": "m", "tp_size": 2, "cuda_graph_bs": "[1, 2"}
    assert any("cut" in n for n in cut.notes)


# --------------------------------------------------------------------------- hints


def test_release_hints() -> None:
    text = """\
pip install "sglang[all]==0.5.11"
Successfully installed sglang-0.5.9 torch-2.8.0
sglang: 0.5.11
  File "/venv/lib/python3.12/site-packages/sglang-0.5.11.dist-info/METADATA", line 1, in x
SGLang `0.5.19.dev410+gedff717ef` (sha `edff717ef`), flashinfer-python 0.6.17
sglang version 0.5.9
- sglang: `0.0.0.dev1+g033446bb05` (dev build from image 1.0.0.270)
Downloading sglang-0.5.12-py3-none-any.whl (3.1 MB)
ValueError: boom
"""
    hints = [(h.version, h.kind) for h in parse_log(text).release_hints]
    assert hints == [
        ("0.5.11", "pip"),
        ("0.5.9", "pip"),
        ("0.5.11", "check_env"),
        ("0.5.11", "dist_info"),
        ("0.5.19.dev410+gedff717ef", "version_string"),
        ("0.5.9", "version_string"),
        ("0.0.0.dev1+g033446bb05", "check_env"),
        ("0.5.12", "pip"),
    ]


def test_python_version_from_text() -> None:
    assert _command("Python: 3.10.12 (main, Nov 20 2023)").python_version == "3.10"
    assert _command("nothing here").python_version is None


def test_gpus_from_check_env_nvidia_smi_and_text() -> None:
    text = """\
Python: 3.12.3
CUDA available: True
GPU 0,1,2,3,4,5,6,7: NVIDIA RTX PRO 6000 Blackwell Server Edition
GPU 0,1,2,3,4,5,6,7 Compute Capability: 12.0
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   33C    P0             70W /  700W |       0MiB /  81559MiB |      0%      Default |
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |                    0 |
| N/A   33C    P0             70W /  700W |       0MiB /  81559MiB |      0%      Default |
GPU 0: Tesla T4 (UUID: GPU-0aa1)
Running on 4x H20 and a GB200 GPU, 8 × B300 too.
ValueError: boom
"""
    parsed = parse_log(text)
    gpus = {g.name: (g.sm, g.count, g.memory_gb) for g in parsed.gpus}
    assert gpus == {
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": (120, 8, None),
        "NVIDIA H100 80GB HBM3": (90, 2, 80),
        "Tesla T4": (75, 1, None),
        "H20": (90, 4, None),
        "GB200": (100, None, None),
        "B300": (103, 8, None),
    }
    assert parsed.python_version == "3.12"


def test_gpu_free_text_forms() -> None:
    parsed = _command("deployed on 8× H100 SXM, also tried 2x RTX PRO 6000 Blackwell (sm_120)")
    assert [(g.name, g.sm, g.count) for g in parsed.gpus] == [
        ("H100 SXM", 90, 8),
        ("RTX PRO 6000 Blackwell", 120, 2),
    ]
    ranged = _command("GPU 0-3: NVIDIA B200")
    assert [(g.name, g.sm, g.count) for g in ranged.gpus] == [("NVIDIA B200", 100, 4)]
    none = _command("model L4 layer T4 variable")  # no count, vendor or "GPU": not a GPU
    assert none.gpus == []


# --------------------------------------------------------------------------- errors and inputs


def test_input_errors() -> None:
    with pytest.raises(EmptyInput):
        parse_log(" \n\t\n")
    with pytest.raises(BinaryInput):
        parse_log("Traceback\x00")
    with pytest.raises(BinaryInput):
        parse_log("ValueError: x" + "\x01\x02\x03" * 10)
    with pytest.raises(InputTooLarge):
        parse_log("ValueError: x\n" * 100, max_bytes=100)
    with pytest.raises(InputTooLarge):
        parse_log("é" * 60, max_bytes=100)  # 120 bytes in UTF-8
    with pytest.raises(BinaryInput):
        parse_bytes(b"ValueError: \xff\xfe")
    with pytest.raises(InputTooLarge):
        parse_bytes(b"x" * 101, max_bytes=100)
    assert parse_bytes("\ufeffValueError: café".encode()).primary is not None
    with pytest.raises(BinaryInput):
        parse_bytes(b"ValueError: x\x00")


def test_no_crash_found_reports_what_was_understood() -> None:
    text = (
        "python -m sglang.launch_server --model-path m --tp 8\n"
        "sglang==0.5.11\nGPU 0,1: NVIDIA H100 80GB HBM3\nall good, server ready\n"
    )
    with pytest.raises(NoCrashFound) as info:
        parse_log(text)
    understood = info.value.details["understood"]
    assert understood["command"] == ["--model-path", "m", "--tp", "8"]
    assert understood["model"] == "m"
    assert understood["release_hints"] == ["0.5.11"]
    assert understood["gpus"] == ["NVIDIA H100 80GB HBM3"]
    json.dumps(info.value.details)


def test_parse_input_variants() -> None:
    raw, extras = parse_input(PR_13421_LOG)
    assert raw.primary is not None and extras == {"hardware": None, "release": None}
    structured = {
        "log": SEED_LOG,
        "command": "docker run --gpus all lmsysorg/sglang:dev python3 -m sglang.launch_server --model-path /models/other --tp 4",
        "release": "v0.5.11",
        "hardware": {"gpu": "RTX PRO 6000", "count": 8},
        "model": "moonshotai/Kimi-K2.6",
        "python": "3.12.3",
        "ticket": 42,
    }
    for payload in (structured, json.dumps(structured), json.dumps(structured).encode()):
        parsed, extras = parse_input(payload)
        assert parsed.command == ["--model-path", "/models/other", "--tp", "4"]
        assert parsed.entrypoint == "docker run … python3 -m sglang.launch_server"
        assert parsed.model == "moonshotai/Kimi-K2.6"
        assert parsed.python_version == "3.12"
        assert parsed.release_hints[0].version == "0.5.11"
        assert parsed.release_hints[0].kind == "explicit"
        assert extras == {"hardware": {"gpu": "RTX PRO 6000", "count": 8}, "release": "v0.5.11"}
        assert any("ticket" in n for n in parsed.notes)
        assert parsed.primary is not None and parsed.primary.frames[-1].line == 3598
    listed, _ = parse_input({"log": PR_13421_LOG, "command": ["sglang", "serve", "--tp", "2"]})
    assert listed.command == ["--tp", "2"] and listed.entrypoint == "sglang serve"
    with pytest.raises(EmptyInput):
        parse_input({"command": "x"})
    with pytest.raises(LogParseError):
        parse_input(42)  # type: ignore[arg-type]
    # JSON without a "log" key is just text
    with pytest.raises(NoCrashFound):
        parse_input('{"hello": 1}')


# --------------------------------------------------------------------------- robustness

FRAGMENTS = [
    "Traceback (most recent call last):",
    '  File "/x/site-packages/sglang/srt/server_args.py", line 3598, in _handle',
    '  File "<string>", line 9, in __init__',
    '  File "/x/launch_server.py", line 59,',
    "    assert (",
    "           ^^^^^",
    "AssertionError",
    "ValueError: boom",
    "a.b.CustomError: x",
    "[2026-01-01 00:00:00 TP0] ",
    "2026-01-01T00:00:00Z ",
    "svc-1  | ",
    "[pod/a/b] ",
    "Mar 23 14:01:38 host python[1]: ",
    "\x1b[31m",
    "\x1b]8;;",
    "\r\n",
    "\n",
    "\r",
    "\\\n",
    "usage: launch_server.py [-h]",
    "launch_server.py: error: unrecognized arguments: --x",
    "error: argument --a: invalid choice: 'x' (choose from ",
    "error: ambiguous option: --s could match",
    "python -m sglang.launch_server --tp 8 ",
    "sglang serve --model-path <m> [options]",
    "docker run -e SGLANG_X=1 img ",
    "server_args=ServerArgs(a=1, b=[",
    "(((((((((((",
    "'",
    '"',
    "[...]",
    "[Previous line repeated 3 more times]",
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
    "GPU 0,1: NVIDIA H100",
    "GPU 0-7 Compute Capability: 9.0",
    "|   0  NVIDIA H100 80GB HBM3  On  | x |",
    "8x RTX PRO 6000",
    "sglang==0.5.11",
    "sglang-0.5.11.dist-info",
    "SGLANG_X=1",
    'args: ["--tp", ',
    "command:",
    "- --tp",
    'SGLANG_Y: "1"',
    "- name: SGLANG_Z",
    "  value: 2",
    " ",
    "\t",
]


@given(
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=30), max_size=60),
    st.sampled_from(["", "\n", " "]),
)
@settings(max_examples=200, deadline=None)
def test_parse_log_only_raises_logparse_errors(parts: list[str], sep: str) -> None:
    text = sep.join(parts)
    try:
        parsed = parse_log(text)
    except LogParseError:
        return
    assert parsed.exceptions or parsed.argparse_error is not None
    parsed.model_dump_json()


def test_hundred_thousand_line_traceback() -> None:
    body = "".join(
        f'  File "/x/site-packages/sglang/srt/m{i}.py", line {i + 1}, in f{i}\n    g()\n'
        for i in range(50_000)
    )
    text = "Traceback (most recent call last):\n" + body + "RecursionError: too deep\n"
    parsed = parse_log(text)
    assert parsed.primary is not None and parsed.primary.type == "RecursionError"
    assert len(parsed.primary.frames) == 50_000
    assert parsed.primary.frames[-1].function == "f49999"


def test_five_megabyte_log() -> None:
    noise = "[2026-01-01 00:00:00 TP3] INFO scheduler.py:1: Decode batch. #running-req: 1, " * 3
    block = (noise + "\n") * 21_000
    text = block + SEED_LOG + "x" * 200_000 + "\n" + "(" * 50_000 + "\n"
    text += "server_args=ServerArgs(a=" + "[" * 5_000 + "\n"
    assert len(text.encode()) > 5_000_000
    try:
        parsed = parse_log(text)
    except LogParseError:
        return
    assert parsed.primary is not None and parsed.primary.frames[-1].line == 3598
