"""The arithmetic of a check's test in plain words."""

from __future__ import annotations

from service.engine.explain.arithmetic import arithmetic_steps, sentence
from service.engine.expr.interpreter import Provenance, Value
from service.engine.fixes.edits import _arithmetic_values

TEST = (
    "moe_intermediate_size // (server_args.tp_size // server_args.ep_size) "
    "% weight_block_size_n != 0"
)


def _v(x: object) -> Value:
    return Value(x, Provenance("flag", "test"))


FACTS = {"moe_intermediate_size": _v(1536), "weight_block_size_n": _v(128)}


def test_steps_innermost_first_with_names_and_the_comparison() -> None:
    steps = arithmetic_steps(TEST, {"tp_size": _v(8), "ep_size": _v(1)}, FACTS)
    assert steps == [
        "tp_size 8 // ep_size 1 = 8",
        "moe_intermediate_size 1536 // 8 = 192",
        "192 % weight_block_size_n 128 = 64",
        "64 != 0 holds",
    ]


def test_the_sentence_shows_the_fix_too() -> None:
    text = sentence(
        TEST,
        {"tp_size": _v(8), "ep_size": _v(1)},
        FACTS,
        ("--ep 2", {"tp_size": _v(8), "ep_size": _v(2)}),
    )
    assert text is not None
    assert text.endswith(
        "With `--ep 2`: tp_size 8 // ep_size 2 = 4; moe_intermediate_size "
        "1536 // 4 = 384; 384 % weight_block_size_n 128 = 0; 0 != 0 fails."
    )


def test_unknown_operands_give_no_steps() -> None:
    assert arithmetic_steps(TEST, {"tp_size": _v(8)}, {}) == []
    assert sentence("server_args.page_size > 1", {"page_size": _v(4)}, {}) is None
    assert sentence(None, {}, {}) is None


def test_sizes_tried_for_an_integer_in_arithmetic() -> None:
    assert _arithmetic_values("ep_size", [TEST], 1) == [2, 4, 8, 16]
    assert _arithmetic_values("tp_size", [TEST], 8) == [4, 16, 2, 32]
    assert _arithmetic_values("ep_size", ["server_args.ep_size > 1"], 1) == []
    assert _arithmetic_values("ep_size", [TEST], True) == []
