"""Crashes past argument validation: SGLang's quantized-MoE block-shape check, on incidents
generated from each release's own message (rendered with the values of a failing launch).

The engine must read the numbers the message printed, trace ``tp_size``/``moe_ep_size``
to the flags SGLang fills them from, and recommend a parallel layout for which the
printed arithmetic holds, shown in plain words."""

from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest

from kb.code_types import Check
from service.engine.triage import Engine
from tests.service.engine.layouts import layout

MESSAGE_START = "For quantized MoE models, please make sure"
RELEASES = ("0.5.11", "0.5.16", "0.5.23")
#: (moe_intermediate_size, --tp, block) that fail with the default --ep 1
SHAPES = [(1536, 8, 128), (2560, 16, 128)]


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _check(store, release: str) -> Check:
    rows = [c for c in store.checks(release) if (c.message or "").startswith(f'f"{MESSAGE_START}')]
    assert len(rows) == 1, (release, len(rows))
    return rows[0]


def _message(check: Check, size: int, tp: int, ep: int, block: int) -> str:
    """The release's own message source rendered with the crash's values."""
    moe_tp = tp // ep
    names = {
        "moe_intermediate_size": size,
        "moe_tp_size": moe_tp,
        "weight_block_size_n": block,
        "tp_size": tp,
        "moe_ep_size": ep,
        "self": SimpleNamespace(tp_size=tp, moe_ep_size=ep),
    }
    return eval("(" + check.message + ")", {}, names)  # SGLang's f-string


def _holds(size: int, block: int, tp: int, ep: int, dp: int) -> bool:
    """SGLang's own arithmetic (moe_ep_setup.check_quantized_moe_compatibility)."""
    if tp % ep:
        return False
    moe_tp = tp // ep // dp
    return moe_tp > 0 and size % moe_tp == 0 and (size // moe_tp) % block == 0


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("size, tp, block", SHAPES)
@pytest.mark.parametrize("frameless_command", [True, False])
def test_block_shape_fix_makes_the_arithmetic_hold(
    engine, kb, release, size, tp, block, frameless_command
) -> None:
    check = _check(kb.store, release)
    message = _message(check, size, tp, 1, block)
    # as users post it: the exception line alone, with the launch command or without it
    command = f"$ python -m sglang.launch_server --model-path org/some-moe-fp8 --tp {tp}\n"
    log = (command if frameless_command else "") + f"ValueError: {message}\n"
    result = engine.triage(log, release=release)
    assert result.status == "located"
    assert (result.location.path, result.location.start_line) == (
        check.path,
        check.start_line,
    )
    assert result.evaluation.fired == "true"
    printed = {p.expr: p for p in result.printed}
    assert (
        printed["moe_intermediate_size"].value == size
        and printed["moe_intermediate_size"].role == "fact"
    )
    assert printed["weight_block_size_n"].value == block
    # what the message printed is never reported unknown
    assert not any(u.what in printed for u in result.unknowns)
    best = next(f for f in result.fixes if f.recommended)
    new_tp, new_ep, new_dp = layout(best.argv)
    assert _holds(size, block, new_tp, new_ep, new_dp), best.command
    assert new_tp == tp, "the user's --tp is kept while another layout works"
    assert best.command.startswith("python -m sglang.launch_server")
    # the arithmetic in plain words, with the crash's numbers and the fix's
    assert result.arithmetic and f"{size} // {tp} = {size // tp}" in result.arithmetic
    moe_tp = new_tp // new_ep // new_dp  # SGLang: tp // ep // moe_dp
    assert f"{size // moe_tp} % weight_block_size_n {block} = 0" in result.arithmetic
    assert "The arithmetic" in result.explanation


def test_a_message_alone_completes_the_command_with_its_flags(engine, kb) -> None:
    check = _check(kb.store, "0.5.23")
    result = engine.triage(f"ValueError: {_message(check, 1536, 8, 1, 128)}", release="0.5.23")
    best = next(f for f in result.fixes if f.recommended)
    assert layout(best.argv)[0] == 8  # the --tp the crashed process ran with
    assert any("printed in the message" in n for n in result.explanation.split("\n"))
    tp = next(p for p in result.printed if p.expr == "tp_size")
    assert (tp.role, tp.attr, tp.value) == ("flag", "tp_size", 8)


def test_parameters_are_traced_to_their_flags_with_a_cited_line(engine, kb) -> None:
    check = _check(kb.store, "0.5.23")
    result = engine.triage(
        f"ValueError: {_message(check, 1536, 8, 1, 128)}\n"
        "$ python -m sglang.launch_server --model-path m --tp 8",
        release="0.5.23",
    )
    passes = [r for r in result.references if r.kind == "passes"]
    assert passes and passes[0].text.startswith("moe_ep_size is ep_size")
    _, path, line = passes[0].citation.split(":")
    text = kb.store.file_lines("0.5.23", path, int(line), int(line))[0]
    assert "moe_ep_size" in text and "ep_size" in text
    assert passes[0].citation in result.citations


def test_command_lines_render_with_shlex() -> None:
    assert layout(shlex.split("x --tp-size 8 --ep 2")) == (8, 2, 1)
