"""Binding a printed message to the expressions its check formats, for every message style."""

from __future__ import annotations

import enum

import pytest

from service.engine.locate.message import bind_message, parse_printed


def _bound(src: str, message: str) -> dict[str, object]:
    return {b.expr: b.value for b in bind_message(src, message)}


def _render(src: str, **names: object) -> str:
    """The message as Python prints it: the source evaluated over ``names`` (test data)."""
    return str(eval(src, {}, dict(names)))


class Backend(enum.Enum):
    DEEP_GEMM = "deep_gemm"


@pytest.mark.parametrize(
    "src, names",
    [
        # f-string, plain and self-documenting (``{x=}`` prints ``x=repr(x)``), with a spec and
        # conversions, and implicit concatenation of several f-strings
        ('f"need {a} got {b}"', {"a": 4, "b": "fa3"}),
        (
            'f"please make sure ({size=} / {tp=}) % {block=} == 0"',
            {"size": 1536, "tp": 8, "block": 128},
        ),
        ('f"ratio {frac:.2f} of {total!r}"', {"frac": 0.5, "total": "x"}),
        ('f"first {a} " f"then {b}."', {"a": 1, "b": [1, 2]}),
        # %-formatting: positional tuple, one value, named
        ('"tp %d must divide %s" % (tp, name)', {"tp": 8, "name": "deepep"}),
        ('"got %r here" % value', {"value": None}),
        ('"%(n)s layers, %(m)d heads" % {"n": layers, "m": heads}', {"layers": 61, "heads": 128}),
        # str.format: sequential, indexed, named, attribute and item fields
        ('"{} and {}".format(x, y)', {"x": 3, "y": True}),
        ('"{1} before {0}".format(x, y)', {"x": "a", "y": "b"}),
        (
            '"backend {name} (supported: {ok})".format(name=b, ok=opts)',
            {"b": "fa3", "opts": ["triton"]},
        ),
        # concatenation with str()/repr() around the values
        ('"runner " + str(r) + " needs a2a " + repr(a)', {"r": 2, "a": "deepep"}),
    ],
)
def test_each_style_binds_what_it_printed(src: str, names: dict[str, object]) -> None:
    message = _render(src, **names)
    bound = _bound(src, message)
    assert bound, (src, message)
    for expr, value in bound.items():
        assert value == eval(expr, {}, dict(names)), (expr, value)


def test_format_attribute_and_item_fields_keep_their_path() -> None:
    class Cfg:
        size = 7

    src = '"size {c.size} item {d[0]}".format(c=cfg, d=seq)'
    message = _render(src, cfg=Cfg(), seq=[9])
    assert _bound(src, message) == {"cfg.size": 7, "seq[0]": 9}


def test_enum_repr_and_str() -> None:
    src = 'f"runner {backend} repr {backend!r}"'
    message = _render(src, backend=Backend.DEEP_GEMM)
    bound = bind_message(src, message)
    # the same expression printed two different texts: not bound
    assert bound == []
    value, member = parse_printed(repr(Backend.DEEP_GEMM))
    assert value == "deep_gemm" and member == ("Backend", "DEEP_GEMM")
    value, member = parse_printed(str(Backend.DEEP_GEMM))
    assert value == "Backend.DEEP_GEMM" and member == ("Backend", "DEEP_GEMM")


def test_adjacent_placeholders_are_not_split() -> None:
    src = 'f"values {a}{b} end {c}"'
    assert _bound(src, _render(src, a=1, b=2, c=3)) == {"c": 3}


def test_a_message_with_a_prefix_still_binds() -> None:
    src = 'f"tp_size {tp} must be divisible by ep_size {ep}"'
    assert _bound(src, "ValueError: tp_size 8 must be divisible by ep_size 3") == {"tp": 8, "ep": 3}


@pytest.mark.parametrize(
    "message",
    [
        "tp_size 8 must be a power of two",  # another message
        "tp_size 8 must be divisible by ep_size (3) and more text",  # text past its last literal
        "",
    ],
)
def test_a_message_that_does_not_fit_binds_nothing(message: str) -> None:
    assert bind_message('f"tp_size {tp} must be divisible by ep_size ({ep})"', message) == []


def test_sources_that_are_not_literal_messages_bind_nothing() -> None:
    assert bind_message("msg", "anything") == []
    assert bind_message("build_message(x)", "anything") == []
    assert bind_message(None, "x") == []


def test_whitespace_differences_and_the_evidence_text() -> None:
    src = 'f"need   {a}\\n  got {b}"'
    bound = bind_message(src, "need 4 got   5")
    assert [(b.expr, b.value) for b in bound] == [("a", 4), ("b", 5)]
    assert bound[0].evidence == "printed in the message: a=4"


def test_printed_texts_that_are_not_literals_stay_text() -> None:
    assert parse_printed("NVIDIA B200") == ("NVIDIA B200", None)
    assert parse_printed("1.5", ".2f") == (1.5, None)
    assert parse_printed("3", ".1f") == (3.0, None)
    assert parse_printed("[1, 2]") == ([1, 2], None)


def test_lines_after_the_message_are_not_part_of_it() -> None:
    src = 'f"tp_size {tp} must be divisible by ep_size ({ep})."'
    message = "tp_size 8 must be divisible by ep_size (3).\n$ python -m sglang.launch_server --tp 8"
    assert _bound(src, message) == {"tp": 8, "ep": 3}
