"""Past argument validation, the FP8 MoE method's ``create_weights`` block-shape checks and
the MoE runner's fused-function registry (issue #27).

``create_weights`` prints ``intermediate_size_per_partition``, a value no flag is passed as:
SGLang computes it in ``FusedMoE.__init__`` from ``moe_tp_size`` (tp / ep / moe-dp). The
engine must find that arithmetic in the release (cited), solve the checkpoint's size from the
printed value and the launch's flags, and recommend a layout for which the check holds.
A registry lookup whose a2a backend no runner registers must still get the registered
``none`` alternative."""

from __future__ import annotations

import re

import pytest

from kb.code_types import Check
from service.engine.evaluate import params
from service.engine.triage import Engine
from tests.service.engine.layouts import layout

RELEASES = ("0.5.5", "0.5.16", "0.5.23")


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _create_weights_check(store, release: str, word: str) -> Check:
    rows = [
        c
        for c in store.checks(release)
        if c.path == "sglang/srt/layers/quantization/fp8.py"
        and f"weight quantization {word} = " in (c.message or "")
        and "intermediate_size_per_partition" in (c.message or "")
    ]
    assert len(rows) == 1, (release, word, len(rows))
    return rows[0]


def _message(check: Check, per_partition: int, block: int, word: str) -> str:
    names = {"intermediate_size_per_partition": per_partition, word: block}
    return eval("(" + check.message + ")", {}, names)  # SGLang's f-string


@pytest.mark.parametrize("release", RELEASES)
def test_per_partition_size_is_traced_to_the_parallel_flags(kb, release) -> None:
    d = params.formula_for(kb.store, release, "intermediate_size_per_partition", holder=True)
    assert d is not None
    assert "server_args.tp_size" in d.expr and "server_args.ep_size" in d.expr
    assert d.expr.startswith("fused_moe.intermediate_size // ")
    # every step cites a line of the release that says it
    for step in d.steps:
        _, path, line = step.citation.split(":")
        text = kb.store.file_lines(release, path, int(line), int(line))[0]
        assert step.name in text, (step, text)


@pytest.mark.parametrize(
    "release, word, size, tp, block",
    [("0.5.5", "block_k", 768, 2, 256), ("0.5.23", "block_n", 1536, 16, 128)],
)
def test_create_weights_fix_makes_the_block_divide(
    engine, kb, release, word, size, tp, block
) -> None:
    check = _create_weights_check(kb.store, release, word)
    per_partition = size // tp
    assert per_partition % block  # a failing shape
    # the raise's own frame: the same message is also raised by blockwise INT8
    frame = (
        f'  File "/usr/local/lib/python3.11/dist-packages/{check.path}", line '
        f"{check.start_line}, in create_weights\n    raise ValueError(\n"
    )
    log = (
        f"$ python -m sglang.launch_server --model-path org/unknown-moe-fp8 --tp {tp}\n"
        f"Traceback (most recent call last):\n{frame}"
        f"ValueError: {_message(check, per_partition, block, word)}\n"
    )
    result = engine.triage(log, release=release)
    assert result.status == "located"
    assert (result.location.path, result.location.start_line) == (
        check.path,
        check.start_line,
    )
    assert result.evaluation.fired == "true"
    best = next(f for f in result.fixes if f.recommended)
    new_tp, new_ep, new_dp = layout(best.argv)
    moe_tp = new_tp // new_ep // new_dp
    assert new_tp % new_ep == 0 and moe_tp > 0 and (size // moe_tp) % block == 0, best.command
    # the checkpoint's size solved from the printed value and the launch's --tp
    assert f"intermediate_size {size} // {tp} = {per_partition}" in (result.arithmetic or "")
    passes = [r for r in result.references if r.kind == "passes"]
    assert any(r.text.startswith("intermediate_size_per_partition is ") for r in passes)
    assert all(r.citation in result.citations for r in passes)


def test_without_the_launch_the_printed_value_stays_a_fact(engine, kb) -> None:
    check = _create_weights_check(kb.store, "0.5.23", "block_k")
    result = engine.triage(f"ValueError: {_message(check, 384, 256, 'block_k')}", release="0.5.23")
    printed = {p.expr: p for p in result.printed}
    assert printed["intermediate_size_per_partition"].role == "fact"


@pytest.mark.parametrize(
    "release, a2a, runner, with_command",
    [
        ("0.5.11", "deepep", "flashinfer_trtllm", True),
        ("0.5.16", "mooncake", "flashinfer_cutlass", False),
        ("0.5.23", "mooncake", "flashinfer_trtllm", True),
    ],
)
def test_unregistered_a2a_backend_gets_the_registered_none(
    engine, kb, release, a2a, runner, with_command
) -> None:
    rows = kb.store.registrations(release, key=runner)
    assert any(tuple(r["keys"]) == ("none", runner) for r in rows)
    enum = runner.upper()
    message = (
        f"NotImplementedError: Runner backend MoeRunnerBackend.{enum} requires a fused "
        f"func for a2a backend {a2a}, but none is registered."
    )
    command = (
        f"$ python -m sglang.launch_server --model-path m --tp-size 8 --ep-size 8 "
        f"--moe-a2a-backend {a2a} --moe-runner-backend {runner}\n"
    )
    result = engine.triage((command if with_command else "") + message, release=release)
    assert result.status == "located"
    best = next(f for f in result.fixes if f.recommended)
    assert re.search(r"--moe-a2a-backend none\b", best.command), best.command
    assert f"--moe-runner-backend {runner}" in best.command
    assert any(
        c.endswith(f":{r['line']}") and r["path"] in c
        for r in rows
        if tuple(r["keys"]) == ("none", runner)
        for c in result.citations
    )
