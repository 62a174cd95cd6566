"""Tests of the crash-log parser's entry points (``service.engine.logparse.parse``):
public examples, the seed case, input errors, structured input and robustness.

The public examples are copied verbatim from ``shared/incidents/public_examples.jsonl``
so that the tests never read outside the repository.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.engine.logparse.parse import ParsedLog, parse_bytes, parse_input, parse_log
from service.errors import BinaryInput, EmptyInput, InputTooLarge, LogParseError, NoCrashFound

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
    # a log that is only a launch command is answered, with what it lacks in ``missing``
    assert (
        parsed.exceptions
        or parsed.argparse_error is not None
        or (parsed.command is not None and parsed.missing)
    )
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
