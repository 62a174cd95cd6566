"""Tests of argparse error reading (``service.engine.logparse.argparse_errors``), through
:func:`~service.engine.logparse.parse.parse_log`."""

from __future__ import annotations

import pytest

from service.engine.logparse.parse import parse_log
from service.errors import NoCrashFound

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
