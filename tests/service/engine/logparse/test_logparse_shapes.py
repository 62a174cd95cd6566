"""Every shape users paste is read: prefixed tracebacks, argparse variants, bare messages,
cut tracebacks and command fragments (issue 28). Logs are in :mod:`.shapes`."""

from __future__ import annotations

import pytest

from service.engine.logparse.command import FRAGMENT
from service.engine.logparse.frames import UNKNOWN_TYPE
from service.engine.logparse.parse import parse_log
from service.engine.logparse.text import clean_log
from service.engine.triage import Engine
from service.errors import NoCrashFound

from . import shapes

SEED_FUNCTION = "ServerArgs._handle_speculative_decoding"


# --------------------------------------------------------------------------- prefixes


@pytest.mark.parametrize("shape", sorted(shapes.PREFIXED))
def test_prefixed_traceback_is_read_like_the_plain_one(shape: str) -> None:
    parsed = parse_log(shapes.PREFIXED[shape])
    plain = parse_log(shapes.TRACEBACK)
    assert parsed.primary is not None and parsed.primary.type == "AssertionError"
    assert parsed.primary.bare and parsed.missing == []
    assert [(f.package_path, f.line, f.function) for f in parsed.primary.frames] == [
        (f.package_path, f.line, f.function) for f in plain.primary.frames
    ]  # type: ignore[union-attr]
    assert parsed.primary.frames[-1].source == "assert ("


def test_launcher_column_is_cut_only_where_it_belongs() -> None:
    lines = clean_log(shapes.PREFIXED["rich_launcher_column"])
    assert lines[-1] == "AssertionError"
    assert lines[-3].endswith("in _handle_speculative_decoding")
    # one stray column on a prose line stays; on a frame line it goes
    prose = "see the docs at  setup.py:12"
    frame = '  File "/x/sglang/srt/server_args.py", line 9, in f     launcher.py:7'
    other = ["Loading weights", "Capturing cuda graphs", "Warming up", "Still warming"]
    assert clean_log("\n".join([prose, *other, frame])) == [
        prose,
        *other,
        '  File "/x/sglang/srt/server_args.py", line 9, in f',
    ]


def test_a_bare_rank_prefix_needs_to_be_consistent() -> None:
    assert clean_log("0: a\n1: b\n") == ["a", "b"]
    text = "Steps:\n1: install\nthen run it\nand wait\nand look\nnow\n"
    assert clean_log(text)[1] == "1: install"


# --------------------------------------------------------------------------- argparse


def test_indented_argparse_error_after_usage() -> None:
    err = parse_log(shapes.ARGPARSE["indented_error"]).argparse_error
    assert err is not None and err.kind == "unrecognized_arguments"
    assert err.prog == "launch_server.py" and err.flags == ["--speculative-topk"]
    assert err.usage is not None and err.usage.startswith("usage: launch_server.py")


def test_unrecognized_arguments_without_error_prefix() -> None:
    parsed = parse_log(shapes.ARGPARSE["unrecognized_without_error_prefix"])
    err = parsed.argparse_error
    assert err is not None and err.kind == "unrecognized_arguments" and err.prog is None
    assert err.flags == ["--speculative-topk"] and err.values == ["4"]
    assert parsed.missing == []


def test_launch_server_py_error() -> None:
    err = parse_log(shapes.ARGPARSE["launch_server_error"]).argparse_error
    assert err is not None and err.kind == "invalid_choice" and err.values == ["fa9"]
    assert err.flags == ["--attention-backend"] and err.choices == ["triton", "torch_native", "fa3"]


def test_prose_about_arguments_is_not_an_argparse_error() -> None:
    with pytest.raises(NoCrashFound):
        parse_log("argument parsing seems fine to me\nunrecognized things happen\n")


# --------------------------------------------------------------------------- partial logs


def test_bare_message_is_a_frameless_exception_of_unknown_type() -> None:
    parsed = parse_log(shapes.BARE_MESSAGE)
    assert parsed.primary is not None and parsed.primary.type == UNKNOWN_TYPE
    assert parsed.primary.message == shapes.BARE_MESSAGE.strip() and not parsed.primary.frames
    assert parsed.missing == ["the exception type", "the traceback frames"]


def test_logged_message_after_other_output() -> None:
    text = (
        "[2026-01-02 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=8)\n"
        "ERROR: speculative_eagle_topk must be 1 when the trtllm_mha backend is used\n"
        "Loading weights took 0 s\n"
    )
    parsed = parse_log(text)
    assert parsed.primary is not None
    assert parsed.primary.message == (
        "speculative_eagle_topk must be 1 when the trtllm_mha backend is used"
    )


def test_indented_exception_line_without_traceback() -> None:
    parsed = parse_log(shapes.ASSERT_MESSAGE)
    assert parsed.primary is not None and parsed.primary.type == "AssertionError"
    assert parsed.primary.message is not None
    assert parsed.primary.message.startswith("The expert parallel size must be 1")
    assert parsed.missing == ["the traceback frames"]


def test_traceback_cut_before_the_exception_line() -> None:
    parsed = parse_log(shapes.CUT)
    exc = parsed.primary
    assert exc is not None and exc.type == UNKNOWN_TYPE and exc.message is None
    assert exc.frames[-1].line == 3519 and exc.frames[-1].function == "_handle_speculative_decoding"
    assert parsed.missing == ["the exception line (the traceback is cut before it)"]


# --------------------------------------------------------------------------- commands


@pytest.mark.parametrize("shape", sorted(shapes.COMMANDS))
def test_command_fragments_are_read(shape: str) -> None:
    parsed = parse_log(shapes.COMMANDS[shape])
    assert parsed.primary is None and parsed.argparse_error is None
    assert parsed.command is not None
    assert parsed.command[parsed.command.index("--tp") + 1] == "8"
    assert "--speculative-algorithm" in parsed.command
    assert parsed.missing and "only the launch command" in parsed.missing[0]


def test_fragment_entrypoint_and_env() -> None:
    assert parse_log(shapes.COMMANDS["flags_line"]).entrypoint == FRAGMENT
    env = parse_log(shapes.COMMANDS["env_prefix"])
    assert env.entrypoint == "python -m sglang.launch_server"
    assert env.env.get("SGLANG_ENABLE_JIT_DEEPGEMM") == "0"


def test_help_columns_are_not_fragments() -> None:
    text = (
        "  --tp-size TP_SIZE, --tp TP_SIZE\n"
        "  --speculative-algorithm {EAGLE,EAGLE3}    The speculative algorithm.\n"
    )
    with pytest.raises(NoCrashFound):
        parse_log(text)


def test_a_command_with_healthy_output_is_not_a_crash() -> None:
    with pytest.raises(NoCrashFound) as info:
        parse_log(shapes.COMMANDS["env_prefix"] + "The server is fired up and ready to roll!\n")
    assert info.value.details["understood"]["command"][:2] == ["--model-path", "/models/Kimi-K2.6"]


def test_junk_is_still_refused() -> None:
    with pytest.raises(NoCrashFound):
        parse_log(shapes.JUNK)


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


@pytest.mark.parametrize("shape", ["rich_launcher_column", "ray_actor", "slurm_rank"])
def test_prefixed_traceback_is_located(engine: Engine, shape: str) -> None:
    result = engine.triage(shapes.PREFIXED[shape], release="0.5.11")
    assert result.status == "located"
    assert result.location is not None and result.location.function == SEED_FUNCTION
    assert result.location.start_line == 3519


def test_bare_message_is_located_by_its_template(engine: Engine) -> None:
    result = engine.triage(shapes.BARE_MESSAGE, release="0.5.11")
    assert result.status == "located"
    assert result.location is not None and result.location.function == SEED_FUNCTION
    assert result.location.start_line <= 3535 <= result.location.end_line
    assert "partial log: missing the traceback frames" in result.parsed.notes


def test_cut_traceback_is_located_by_its_frames(engine: Engine) -> None:
    result = engine.triage(shapes.CUT, release="0.5.11")
    assert result.location is not None and result.location.start_line == 3519
    assert any(n.startswith("partial log: missing the exception line") for n in result.parsed.notes)


def test_command_only_is_answered_unlocated(engine: Engine) -> None:
    result = engine.triage(shapes.COMMANDS["flags_line"], release="0.5.11")
    assert result.status == "unlocated" and result.location is None
    assert result.parsed.command is not None and "--speculative-eagle-topk" in result.parsed.command
    assert any("only the launch command" in n for n in result.parsed.notes)


def test_message_after_the_launch_command_and_its_output() -> None:
    text = (
        "python -m sglang.launch_server --model-path /m --tp 8 \\\n"
        "    --attention-backend trtllm_mha --speculative-eagle-topk 4\n"
        "Loading safetensors checkpoint shards: 100% 64/64\n" + shapes.BARE_MESSAGE
    )
    parsed = parse_log(text)
    assert parsed.command is not None and "--attention-backend" in parsed.command
    assert parsed.primary is not None and parsed.primary.message == shapes.BARE_MESSAGE.strip()
