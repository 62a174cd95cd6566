"""Lazy truths and values: equal to ``evaluate``'s, reading only what decides them."""

from __future__ import annotations

import pytest

from kb.errors import UnsafeExpression
from service.engine.expr.decide import decide, decide_value
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Value, evaluate
from service.engine.expr.trace import FactsTrace
from tests.service.engine.expr.test_expr import over_random_inputs, random_env

FACT = Provenance("fact", "test")


def _same(a: object, b: object) -> bool:
    return a is b or (a is not UNKNOWN and b is not UNKNOWN and repr(a) == repr(b))


@over_random_inputs
def test_decide_equals_evaluate(text: str, values: dict, fact: object, probe: object) -> None:
    e = random_env(values, fact, probe)
    try:
        r = evaluate(text, e)
    except UnsafeExpression:
        with pytest.raises(UnsafeExpression):
            decide(text, e)
        return
    assert decide(text, e) is r.truth
    assert _same(decide_value(text, e), r.value), (text, r.value)


def _traced(text: str, facts: dict[str, object], **attrs: object) -> tuple[object, set]:
    trace = FactsTrace({k: Value(v, FACT) for k, v in facts.items()}, {})
    trace.provenance = False
    e = Env({k: Value(v, FACT) for k, v in attrs.items()}, trace)
    return decide(text, e), {key for (_, key), _ in trace.snapshot()}


def test_operands_after_the_deciding_one_are_not_read() -> None:
    facts = {"is_sm100_supported()": True, "is_hip()": False}
    assert _traced("self.a and is_sm100_supported()", facts, a=False) == (False, set())
    assert _traced("self.a and is_sm100_supported()", facts, a=True) == (
        True,
        {"is_sm100_supported()"},
    )
    # an unknown operand does not decide: the next one is read
    t, read = _traced("missing_fact() or is_hip() or is_sm100_supported()", facts)
    assert t is True and read == {"missing_fact()", "is_hip()", "is_sm100_supported()"}
    # a ternary reads only the branch its known test picks
    t, read = _traced("is_hip() if self.a else is_sm100_supported()", facts, a=0)
    assert t is True and read == {"is_sm100_supported()"}


def test_every_operand_is_read_when_the_truth_stays_unknown() -> None:
    t, read = _traced("missing_fact() and is_sm100_supported()", {"is_sm100_supported()": True})
    assert t is UNKNOWN and read == {"missing_fact()", "is_sm100_supported()"}


def test_an_unknown_ternary_reads_its_test_once() -> None:
    """Both branches decide a ternary whose test is unknown; the test is not read again,
    and the branches are read lazily too."""
    reads: list[str] = []

    class Counting(dict):  # type: ignore[type-arg]
        def get(self, key, default=None):  # type: ignore[no-untyped-def]
            reads.append(key)
            return super().get(key, default)

    attrs = Counting(tp_size=Value(2, FACT), dp_size=Value(UNKNOWN, FACT))
    text = "(args.tp_size > 1 or args.pp_size > 1) if args.dp_size > 1 else args.tp_size == 2"
    assert decide(text, Env(attrs)) is True
    assert decide_value(text, Env(attrs)) is True
    assert reads.count("dp_size") == 2 and "pp_size" not in reads  # once per call
    reads.clear()
    e = Env(attrs)
    assert evaluate(text, e).truth is True and reads.count("dp_size") == 1
    assert "pp_size" in reads  # evaluate reads every leaf, to show each atom
