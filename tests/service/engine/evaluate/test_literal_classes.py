"""An attribute read only through tests against literals is kept as the answers to those
tests (:mod:`service.engine.evaluate.literal_classes`): values answering them alike give
the interpreter's every answer alike."""

from __future__ import annotations

import itertools

from service.engine.evaluate.literal_classes import Tests, answers_signature, read_by_tests, uses_of
from service.engine.expr.interpreter import Env, Provenance, Value, evaluate


def _value(v: object) -> Value:
    return Value(v, Provenance("flag", f"--x {v}"))


def _tests(*texts: str, target: str | None = None) -> dict[str, Tests]:
    """Of ``x`` and ``y``, those the texts name and read by tests, with the tests."""
    uses = uses_of((t, target) for t in texts)
    return read_by_tests([uses], [n for n in ("x", "y") if n in uses])


def test_tests_against_literals_are_collected() -> None:
    got = _tests("args.x in ('fp8_e4m3', 'fp8_e5m2') and not args.y")
    assert got == {"x": (("eq", "fp8_e4m3"), ("eq", "fp8_e5m2")), "y": ()}
    assert _tests("args.x > 1")["x"] == (("eq", 1), ("gt", 1), ("lt", 1))
    assert _tests("args.x.startswith(('fp8', 'fp4'))")["x"] == (("sw", "fp4"), ("sw", "fp8"))
    assert _tests("'fp8' in args.x")["x"] == (("has", "fp8"),)
    assert _tests("args.x is None")["x"] == (("is", None),)
    # a literal against a written-out collection, tuples against literal tuples
    assert _tests("'trtllm_mha' in (args.x, args.y)") == {
        "x": (("eq", "trtllm_mha"),),
        "y": (("eq", "trtllm_mha"),),
    }
    assert _tests("(args.x, args.y) != (1, 1)") == {"x": (("eq", 1),), "y": (("eq", 1),)}
    # the value of ``x or y`` is one of them: each is tested
    assert _tests("(args.x or args.y) in (None, 'fa3')") == {
        "x": (("eq", None), ("eq", "fa3")),
        "y": (("eq", None), ("eq", "fa3")),
    }


def test_any_other_use_keeps_the_exact_value() -> None:
    assert _tests("args.x == args.y") == {}
    for other in (
        "len(args.x) > 2",
        "args.x in SOME_CONSTANT",
        "args.x is 'auto'",  # identity of a text: not a test
        "x == 'a'",  # a local named like the attribute
        "args.x + 1 > 2",
    ):
        assert "x" not in _tests(other), other
    assert "x" not in _tests("getattr(args, 'x') == 'a'", "args.x == 'a'")
    # the value of a write to another attribute: a copy
    assert "x" not in _tests("args.x", target="z")
    # a text of several uses: one other use is enough
    assert "x" not in _tests("args.x == 'a'", "args.x + 1 > 2")
    # read although no text spells it (a helper, a computed name): never by tests
    assert read_by_tests([uses_of([("args.x == 'a'", None)])], ["x", "z"]) == {"x": (("eq", "a"),)}
    # unparseable: the interpreter cannot read it either; it names nothing
    assert _tests("backend := args.x", "args.x == 'a'")["x"] == (("eq", "a"),)


def test_a_write_back_to_itself_keeps_the_tests() -> None:
    resolved = "'fp8_e4m3' if args.x == 'auto' else args.x"
    # the folded value is the one given or a literal: the literal is a test as well
    assert _tests(resolved, target="x") == {"x": (("eq", "auto"), ("eq", "fp8_e4m3"))}
    assert _tests("args.x or 'auto'", target="x") == {"x": (("eq", "auto"),)}
    # a leaf that is neither the attribute nor a literal: the folded value may be anything
    assert _tests("args.y if args.x == 'auto' else args.x", target="x") == {}
    # the resolved value compared with the value given (did the resolution change it?)
    changed = f"({resolved}) != args.x"
    assert _tests(changed) == {"x": (("eq", "auto"), ("eq", "fp8_e4m3"))}


CONDITIONS = [
    "args.x in ('fp8_e4m3', 'fp8_e5m2') and not args.y",
    "args.x.startswith('fp8') or args.y > 2",
    "'fp8' in args.x and (args.y, 1) == (4, 1)",
    "(args.y or 3) >= 4",
    "('bf16' if args.x == 'auto' else args.x) != args.x",
    "args.y is None or args.y < 2",
]
VALUES = {
    "x": ["auto", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_x", "nvfp4", "fp4", "int8", ""],
    "y": [None, 0, 1, 2, 3, 4, 8, 16, True],
}


def test_equal_signatures_give_the_interpreter_equal_answers() -> None:
    """Property: over every pair of environments whose values sign alike under the tests
    of the conditions, each condition evaluates alike."""
    tests = read_by_tests([uses_of((c, None) for c in CONDITIONS)], ("x", "y"))
    assert set(tests) == {"x", "y"}
    by_signature: dict[object, list[object]] = {}
    for x, y in itertools.product(VALUES["x"], VALUES["y"]):
        attrs = {"x": _value(x), "y": _value(y)}
        sig = tuple(answers_signature(attrs[n], tests[n]) for n in ("x", "y"))
        truths = [evaluate(c, Env(attrs, {})).truth for c in CONDITIONS]
        by_signature.setdefault(sig, []).append(truths)
    assert any(len(v) > 1 for v in by_signature.values())  # some values do share a class
    for answers in by_signature.values():
        assert all(a == answers[0] for a in answers)


def test_signature_views() -> None:
    tests: Tests = (("eq", "fp8_e4m3"),)
    assert answers_signature(_value("bf16"), tests) == answers_signature(_value("nvfp4"), tests)
    assert answers_signature(_value("bf16"), tests) != answers_signature(_value("fp8_e4m3"), tests)
    assert answers_signature(_value(""), tests) != answers_signature(_value("bf16"), tests)  # truth
    assert answers_signature(_value(1), ()) != answers_signature(_value(True), ())  # types apart
    assert answers_signature(None, tests) == "?"
    assert answers_signature(_value(["a"]), tests) == ("exact", "['a']")
    # incomparable types: the answer is unknown, as the interpreter's
    assert answers_signature(_value("a"), (("lt", 1),)) == ("str", True, (None,))
