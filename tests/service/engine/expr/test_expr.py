"""Behaviour of the safe, three-valued condition evaluator."""

from __future__ import annotations

import copy
import pickle
import tracemalloc
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb.errors import UnsafeExpression
from service.engine.expr.interpreter import (
    UNKNOWN,
    Env,
    Provenance,
    Value,
    evaluate,
    fact_key,
    normalize,
    referenced_names,
    truth,
    validate,
)

FLAG = Provenance("flag", "--x")
DEFAULT = Provenance("default", "default at server_args.py:1")
FACT = Provenance("fact", "probed")

T, F, U = True, False, UNKNOWN


def env(facts: dict[str, Any] | None = None, functions: Any = None, **attrs: Any) -> Env:
    return Env(
        {k: Value(v, FLAG) for k, v in attrs.items()},
        {k: Value(v, FACT) for k, v in (facts or {}).items()},
        functions,
    )


def bare(**attrs: Any) -> Env:
    """Attributes whose value is UNKNOWN are left out, as a real env would."""
    return env(**{k: v for k, v in attrs.items() if v is not UNKNOWN})


# ------------------------------------------------------------------ Kleene logic

AND = {
    (T, T): T, (T, F): F, (T, U): U,
    (F, T): F, (F, F): F, (F, U): F,
    (U, T): U, (U, F): F, (U, U): U,
}  # fmt: skip
OR = {
    (T, T): T, (T, F): T, (T, U): T,
    (F, T): T, (F, F): F, (F, U): U,
    (U, T): T, (U, F): U, (U, U): U,
}  # fmt: skip


@pytest.mark.parametrize(("a", "b"), list(AND))
def test_kleene_and_or(a: object, b: object) -> None:
    e = bare(a=a, b=b)
    assert truth("self.a and self.b", e) is AND[(a, b)]
    assert truth("self.a or self.b", e) is OR[(a, b)]


@pytest.mark.parametrize(("a", "expected"), [(T, F), (F, T), (U, U)])
def test_kleene_not(a: object, expected: object) -> None:
    assert truth("not self.a", bare(a=a)) is expected


@pytest.mark.parametrize(
    ("test", "body", "orelse", "expected"),
    [(T, 1, 0, T), (F, 1, 0, F), (U, 1, 0, U), (U, 1, 1, T), (U, 0, 0, F), (U, 2, 1, T)],
)
def test_ternary_with_unknown_test(test: object, body: int, orelse: int, expected: object) -> None:
    assert truth("self.b if self.t else self.o", bare(t=test, b=body, o=orelse)) is expected


def test_unknown_propagates_through_comparisons_and_arithmetic() -> None:
    e = bare(a=UNKNOWN, n=3)
    for text in (
        "self.a is None",
        "self.a > 1",
        "self.a + 1 == 2",
        "self.n % self.a == 0",
        "-self.a < 0",
    ):
        assert truth(text, e) is UNKNOWN, text
    assert truth("self.a is None or self.n == 3", e) is True
    assert truth("self.n > 5 and self.a > 1", e) is False


def test_unknown_is_not_a_bool() -> None:
    assert repr(UNKNOWN) == "unknown"
    with pytest.raises(TypeError):
        bool(UNKNOWN)
    assert pickle.loads(pickle.dumps(UNKNOWN)) is UNKNOWN
    assert copy.deepcopy([UNKNOWN])[0] is UNKNOWN


@pytest.mark.parametrize(
    ("value", "expected"), [([], F), (["a"], T), ("", F), ("x", T), (None, F), (0, F), (2, T)]
)
def test_python_truthiness_of_known_values(value: object, expected: bool) -> None:
    assert truth("self.lora_paths", env(lora_paths=value)) is expected
    assert truth("not self.lora_paths", env(lora_paths=value)) is (not expected)


# -------------------------------------------------------------- atoms and inputs


def test_seed_assert_atoms_and_provenance() -> None:
    e = Env(
        {
            "speculative_eagle_topk": Value(4, Provenance("flag", "--speculative-eagle-topk 4")),
            "speculative_num_draft_tokens": Value(None, DEFAULT),
        }
    )
    r = evaluate(
        "self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None", e
    )
    assert r.value is False and r.truth is False
    assert [(a.text, a.value) for a in r.atoms] == [
        ("self.speculative_eagle_topk is None", False),
        ("self.speculative_num_draft_tokens is None", True),
    ]
    assert r.atoms[0].inputs == (
        ("speculative_eagle_topk", 4, Provenance("flag", "--speculative-eagle-topk 4")),
    )
    assert r.atoms[1].inputs == (("speculative_num_draft_tokens", None, DEFAULT),)
    assert r.names == {"speculative_eagle_topk", "speculative_num_draft_tokens"}
    assert r.unknowns == ()


def test_multiline_source_as_sglang_prints_it() -> None:
    text = "(\n    self.a is None\n    and self.b is None\n)"
    assert truth(text, env(a=None, b=None)) is True
    assert truth("self.a is None\n    and self.b is None", env(a=None, b=1)) is False


def test_atoms_in_source_order_for_ternary() -> None:
    r = evaluate(
        "self.dp_size > 1 if self.enable_dp_attention else True",
        env(dp_size=1, enable_dp_attention=True),
    )
    assert [a.text for a in r.atoms] == ["self.dp_size > 1", "self.enable_dp_attention", "True"]
    assert r.truth is False
    assert (
        truth(
            "self.dp_size > 1 if self.enable_dp_attention else True",
            env(dp_size=1, enable_dp_attention=False),
        )
        is True
    )


def test_unknowns_only_those_that_mattered() -> None:
    e = bare(a=False, b=UNKNOWN, c=UNKNOWN)
    r = evaluate("self.a and self.b", e)
    assert r.truth is False and r.unknowns == ()
    assert r.atoms[1].value is UNKNOWN  # still shown
    r = evaluate("(self.b or True) and self.c", e)
    assert r.truth is UNKNOWN and r.unknowns == ("c",)


def test_or_with_unknown_prefix_gives_decided_bool() -> None:
    r = evaluate("self.a or 'default'", bare(a=UNKNOWN))
    assert r.truth is True and r.value is True
    assert evaluate("self.a or 'default'", env(a="")).value == "default"
    assert evaluate("self.a and 5", env(a=3)).value == 5


def test_accepts_ast_nodes_from_an_assert_statement() -> None:
    import ast

    stmt = ast.parse(
        "assert self.speculative_eagle_topk is None, "
        "f'topk={self.speculative_eagle_topk} needs --speculative-num-draft-tokens'"
    ).body[0]
    assert isinstance(stmt, ast.Assert) and stmt.msg is not None
    e = env(speculative_eagle_topk=4)
    assert evaluate(stmt.test, e).truth is False
    assert evaluate(stmt.msg, e).value == "topk=4 needs --speculative-num-draft-tokens"
    assert evaluate(stmt.msg, bare()).value is UNKNOWN


def test_raw_values_are_wrapped() -> None:
    r = evaluate("self.a + fact", Env({"a": 1}, {"fact": 2}))
    assert r.value == 3
    assert [i[2].kind for i in r.atoms[0].inputs] == ["derived", "derived"]


# ------------------------------------------------------------------ membership


def test_in_with_tuples_and_lists() -> None:
    cond = 'self.speculative_algorithm in ("EAGLE", "EAGLE3") and self.page_size > 1'
    assert truth(cond, env(speculative_algorithm="EAGLE3", page_size=16)) is True
    assert truth(cond, env(speculative_algorithm="NGRAM", page_size=16)) is False
    assert truth(cond, env(speculative_algorithm=None, page_size=16)) is False
    assert truth(cond, bare(speculative_algorithm=UNKNOWN, page_size=1)) is False
    assert truth(cond, bare(speculative_algorithm=UNKNOWN, page_size=16)) is UNKNOWN
    assert (
        truth('model_arch in ["DeepseekV3ForCausalLM", "Qwen3"]', env({"model_arch": "Qwen3"}))
        is True
    )
    assert truth('self.x not in ["a"]', env(x="b")) is True


def test_in_with_unknown_parts() -> None:
    e = bare(a=UNKNOWN, xs=["x"])
    assert truth('"x" in (self.a, "x")', e) is True
    assert truth('"y" in (self.a, "x")', e) is UNKNOWN
    assert truth("self.a in ()", e) is False
    assert truth("self.a in self.xs", e) is UNKNOWN
    assert truth('"x" in self.a', e) is UNKNOWN
    assert truth('"x" in self.xs', e) is True
    assert truth('"mooncake" in "mooncake-store"', e) is True


# ---------------------------------------------------------- views, facts, calls


@pytest.mark.parametrize(
    "text",
    [
        "self.attention_backend",
        "server_args.attention_backend",
        "cfg.attention_backend",
        "args.attention_backend",
        "resolved_view(server_args).attention_backend",
        "resolving_view(server_args).attention_backend",
        "ResolvedView(server_args, 'x').attention_backend",
        "getattr(self, 'attention_backend', None)",
        "getattr(resolved_view(cfg), 'attention_backend')",
    ],
)
def test_transparent_views(text: str) -> None:
    r = evaluate(f'{text} == "trtllm_mha"', env(attention_backend="trtllm_mha"))
    assert r.truth is True
    assert r.atoms[0].inputs == (("attention_backend", "trtllm_mha", FLAG),)
    assert r.names == {"attention_backend"}


def test_getattr_default_and_missing_attribute() -> None:
    r = evaluate("getattr(self, 'enable_foo', False)", env())
    assert r.truth is False and r.atoms[0].inputs[0][2].kind == "derived"
    r = evaluate("self.enable_foo", env())
    assert r.truth is UNKNOWN and r.unknowns == ("enable_foo",)
    assert r.atoms[0].inputs[0][2] == Provenance("unknown", "attribute enable_foo not known")


def test_facts_for_zero_arg_functions_and_names() -> None:
    facts = {"is_sm100_supported()": True, "get_device_sm()": 90, "is_hip": False}
    e = env(facts, page_size=1)
    assert truth("is_sm100_supported()", e) is True
    assert truth("get_device_sm() >= 100", e) is False
    assert truth("not is_hip and self.page_size == 1", e) is True
    r = evaluate("get_device_sm() >= 100", e)
    assert r.atoms[0].inputs == (("get_device_sm()", 90, FACT),)


def test_deeper_chains_and_methods_on_arg_objects_come_from_facts() -> None:
    facts = {
        "get_model_config().hf_config.architectures": ["DeepseekV3ForCausalLM"],
        "use_mla_backend()": True,
        "model_config.hf_config.num_heads": 16,
    }
    e = env(facts)
    assert (
        evaluate("self.get_model_config().hf_config.architectures[0]", e).value
        == "DeepseekV3ForCausalLM"
    )
    assert truth("self.use_mla_backend()", e) is True
    assert truth("self.model_config.hf_config.num_heads % 8 == 0", e) is True
    r = evaluate("self.model_config.hf_config.other > 1", e)
    assert r.unknowns == ("model_config.hf_config.other",)
    assert evaluate("self.use_mla_backend()", env()).unknowns == ("use_mla_backend()",)


def test_dict_attribute_walks_known_value() -> None:
    e = env(speculative_config={"topk": 2})
    assert truth("self.speculative_config.topk == 2", e) is True
    assert truth("self.speculative_config.get('topk', 1) > 1", e) is True


def test_unknown_call_is_unknown_and_reported() -> None:
    r = evaluate("is_flashinfer_available() and self.page_size > 1", env(page_size=16))
    assert r.truth is UNKNOWN
    assert r.unknowns == ("is_flashinfer_available()",)
    assert truth("open('/etc/passwd')", env()) is UNKNOWN
    assert truth("eval('1')", env()) is UNKNOWN
    r = evaluate("is_flashinfer_available() and self.page_size > 1", env(page_size=1))
    assert r.truth is False and r.unknowns == ()


def test_functions_receive_views_and_record_reads() -> None:
    def attention_backends_of(view: Any) -> set[str]:
        return {view.attention_backend, view.decode_attention_backend}

    e = env(
        functions={"attention_backends_of": attention_backends_of},
        attention_backend="fa3",
        decode_attention_backend="trtllm_mha",
    )
    r = evaluate('"trtllm_mha" in attention_backends_of(resolved_view(server_args))', e)
    assert r.truth is True
    assert {i[0] for i in r.atoms[0].inputs} >= {"attention_backend", "decode_attention_backend"}
    assert r.names == {"attention_backend", "decode_attention_backend"}

    def boom() -> bool:
        raise RuntimeError("no GPU")

    assert truth("boom()", env(functions={"boom": boom})) is UNKNOWN


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("int(self.speculative_eagle_topk) != 1", True),
        ("len(self.lora_paths) > 0", True),
        ("self.x % self.y == 0", True),
        ("self.s.startswith('mooncake')", True),
        ("self.load_format.lower() == 'gguf'", True),
        ("self.s.split('-')[1] == 'store'", True),
        ("isinstance(self.x, int) and isinstance(self.lora_paths, (list, tuple))", True),
        ("isinstance(self.none, type(None))", True),
        ("max(self.x, self.y) == 8 and min([self.x, self.y]) == 4", True),
        ("sorted(self.lora_paths)[-1] == 'b'", True),
        ("any([self.none, self.x]) and not all([self.none, self.x])", True),
        ("self.lora_paths[1:] == ['a']", True),
        ("{'a': 1}.get(self.s, 0) == 0", True),
        ("f'{self.x}-{self.s!r}' == \"8-'mooncake-store'\"", True),
        ("'%s/%d' % (self.s, self.x) == 'mooncake-store/8'", True),
    ],
)
def test_pure_builtins_and_methods(text: str, expected: bool) -> None:
    e = env(
        speculative_eagle_topk="4",
        lora_paths=["b", "a"],
        x=8,
        y=4,
        s="mooncake-store",
        load_format="GGUF",
        none=None,
    )
    assert truth(text, e) is expected


@pytest.mark.parametrize(
    "text",
    [
        "int(self.s) > 0",
        "self.lora_paths[5] == 'a'",
        "{'a': 1}['b'] == 1",
        "self.x / 0 > 1",
        "self.x < 'a'",
        "self.s.format(1)",
        "self.lora_paths.append(1)",
        "len(self.a) > 0",
        "f'{self.a}' == 'x'",
        "str([self.a]) == '[1]'",
    ],
)
def test_errors_and_non_whitelisted_become_unknown(text: str) -> None:
    e = bare(s="abc", lora_paths=["a"], x=1, a=UNKNOWN)
    assert truth(text, e) is UNKNOWN


def test_fact_key() -> None:
    assert (
        fact_key("self.get_model_config().hf_config.architectures")
        == "get_model_config().hf_config.architectures"
    )
    assert fact_key("is_sm100_supported()") == "is_sm100_supported()"
    assert fact_key('get_bool_env_var("SGLANG_X")') == "get_bool_env_var('SGLANG_X')"
    assert fact_key("envs.SGLANG_X.get()") == "envs.SGLANG_X.get()"
    facts = {"envs.SGLANG_X.get()": True, "get_bool_env_var('SGLANG_X')": False}
    assert truth('envs.SGLANG_X.get() and not get_bool_env_var("SGLANG_X")', env(facts)) is True


# ---------------------------------------------------------------- static helpers


def test_normalize_equivalence_across_releases() -> None:
    spellings = [
        "self.a is None and self.b > 1",
        "cfg.a is None and cfg.b > 1",
        "resolved_view(server_args).a is None and resolving_view(server_args).b > 1",
        "(\n    server_args.a is None\n    and args.b > 1\n)",
    ]
    assert {normalize(s) for s in spellings} == {"args.a is None and args.b > 1"}
    assert normalize("self.a is None") != normalize("self.b is None")
    assert normalize("any(x for x in self.a)") == "any((x for x in args.a))"


def test_referenced_names() -> None:
    text = (
        "self.a is None and resolved_view(server_args).b and getattr(cfg, 'c', 1)"
        " and self.use_mla_backend() and self.model_config.x and model_arch"
    )
    assert referenced_names(text) == {"a", "b", "c", "model_config"}


# ------------------------------------------------------------------ safety


UNSAFE = [
    "lambda: 1",
    "self.__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "__import__('os')",
    "__import__('os').system('true')",
    "[x for x in self.a]",
    "{x: 1 for x in self.a}",
    "any(x for x in self.a)",
    "(y := 1)",
    "[*self.a]",
    "f(**self.a)",
    "{**self.a}",
    "getattr(self, '__dict__')",
    "a @ b",
    "await x",
    "x = 1",
    "import os",
    "",
    "self.a is",
]


@pytest.mark.parametrize("text", UNSAFE)
def test_unsafe_syntax_is_refused(text: str) -> None:
    with pytest.raises(UnsafeExpression):
        validate(text)
    with pytest.raises(UnsafeExpression):
        evaluate(text, env(a=[1]))


def test_validate_accepts_the_sglang_shapes() -> None:
    for text in [
        "self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None",
        '"trtllm_mha" in attention_backends_of(resolved_view(server_args))',
        "self.get_model_config().hf_config.architectures[0]",
        "self.dp_size > 1 if self.enable_dp_attention else True",
        "f'{self.x!r:>10}'",
        "self._private_flag",
    ]:
        validate(text)


@pytest.mark.parametrize(
    "text",
    [
        "10 ** 10 ** 10",
        "2 ** 100000",
        "(10 ** 1000) * (10 ** 4000)",
        "1 << 10 ** 9",
        "'a' * 10 ** 9",
        "[0] * 10 ** 9",
        "[[0] * 9000] * 9000",
        "'%0100000000d' % 1",
        "f'{1:>100000000}'",
        "'a' * 9000 + 'b' * 9000",
        "('x' * 5000).replace('x', 'yyyy')",
        "round(5, -10 ** 9)",
    ],
)
def test_huge_values_are_unknown_without_being_built(text: str) -> None:
    """A value beyond MAX_SIZE / MAX_INT_BITS is UNKNOWN, and is refused from its operands'
    sizes before it is computed: the whole evaluation allocates well under 1 MiB at its
    peak (under 150 KB today), where building ``'a' * 10 ** 9``, ``'%0100000000d' % 1``
    and the like takes 100 MB or more (and ``10 ** 10 ** 10`` would never finish)."""
    evaluate("1 + 1", env())  # first-use caches are not what is measured
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        assert evaluate(text, env()).value is UNKNOWN
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not tracing:
            tracemalloc.stop()
    assert peak < 1 << 20, peak


@pytest.mark.parametrize(
    "text",
    [
        "(" * 1000 + "x" + ")" * 1000,
        "not " * 1000 + "self.a",
        "- " * 5000 + "1",
        " + ".join(["self.a"] * 3000),
        ".".join(["self"] + ["a"] * 3000),
        "[" * 150 + "]" * 150,
        " and ".join(["self.a"] * 2500),
        "x" * 30000,
        "not " * 100000 + "x",
    ],
)
def test_deep_or_large_expressions_are_refused(text: str) -> None:
    with pytest.raises(UnsafeExpression):
        evaluate(text, env(a=True))
    with pytest.raises(UnsafeExpression):
        validate(text)


def test_moderate_nesting_is_fine() -> None:
    assert truth("not " * 50 + "self.a", env(a=True)) is True
    assert truth(" and ".join(["self.a"] * 500), env(a=True)) is True


# -------------------------------------------------------------- property tests

ATTRS = ["a", "b", "c"]
known_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from(["", "x", "EAGLE", "mooncake-store"]),
    st.lists(st.integers(-3, 3), max_size=3),
)
any_values = st.one_of(known_values, st.just(UNKNOWN))

leaf = st.one_of(
    st.sampled_from(
        [f"self.{a}" for a in ATTRS] + ["cfg.a", "resolved_view(server_args).b", "fact", "probe()"]
    ),
    st.sampled_from(
        ["None", "True", "False", "0", "1", "-2", "3", "''", "'x'", "'EAGLE'", "[]", "(1, 2)"]
    ),
)


def _compose(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binops = st.sampled_from(["+", "-", "*", "//", "%", "**"])
    cmps = st.sampled_from(
        ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is None", "is not None"]
    )
    pair = st.tuples(children, children)
    return st.one_of(
        st.builds(lambda p, o: f"({p[0]} {o} {p[1]})", pair, binops),
        st.builds(
            lambda p, o: f"({p[0]} {o})" if o.startswith("is") else f"({p[0]} {o} {p[1]})",
            pair,
            cmps,
        ),
        st.builds(lambda p, o: f"({p[0]} {o} {p[1]})", pair, st.sampled_from(["and", "or"])),
        st.builds(lambda c: f"(not {c})", children),
        st.builds(
            lambda t: f"({t[0]} if {t[1]} else {t[2]})", st.tuples(children, children, children)
        ),
        st.builds(
            lambda c, f: f"{f}({c})",
            children,
            st.sampled_from(["len", "int", "str", "bool", "any", "abs", "sorted"]),
        ),
        st.builds(lambda p: f"[{p[0]}, {p[1]}]", pair),
        st.builds(lambda p: f"{p[0]}[{p[1]}]", pair),
        st.builds(
            lambda c, m: f"({c}).{m}()", children, st.sampled_from(["lower", "strip", "isdigit"])
        ),
        st.builds(lambda c: f"f'<{{{c}}}>'", children.filter(lambda c: "'" not in c)),
        st.builds(lambda c: f"-{c}", children),
    )


expressions = st.recursive(leaf, _compose, max_leaves=12)


def _py_eval(text: str, attrs: dict[str, object], fact: object, probe: object) -> object:
    """Reference semantics: CPython itself, on fully known inputs (test-only)."""
    ns = types.SimpleNamespace(**attrs)
    scope = {"self": ns, "cfg": ns, "server_args": ns, "resolved_view": lambda x: x,
             "fact": fact, "probe": lambda: probe}  # fmt: skip
    return eval(text, scope)


def over_random_inputs(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test(text, values, fact, probe)`` by hypothesis: a random expression, attribute
    values, a fact and a probe's value (each possibly UNKNOWN)."""
    test = given(
        text=expressions,
        values=st.fixed_dictionaries({a: any_values for a in ATTRS}),
        fact=any_values,
        probe=any_values,
    )(test)
    test = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
        test
    )
    return pytest.mark.filterwarnings("ignore::SyntaxWarning")(test)


def random_env(values: dict, fact: object, probe: object) -> Env:
    """The env of :func:`over_random_inputs`' draw: UNKNOWN inputs left out."""
    facts = {k: v for k, v in (("fact", fact), ("probe()", probe)) if v is not UNKNOWN}
    return env(facts, **{k: v for k, v in values.items() if v is not UNKNOWN})


@over_random_inputs
def test_evaluate_never_raises_anything_but_unsafe(
    text: str, values: dict, fact: object, probe: object
) -> None:
    e = random_env(values, fact, probe)
    try:
        r = evaluate(text, e)
    except UnsafeExpression:
        return
    assert r.truth is True or r.truth is False or r.truth is UNKNOWN
    assert all(a.value in (True, False) or a.value is UNKNOWN for a in r.atoms)


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=expressions,
    values=st.fixed_dictionaries({a: any_values for a in ATTRS}),
    concrete=st.fixed_dictionaries({a: known_values for a in ATTRS}),
    fact=any_values,
    probe=any_values,
    concrete_fact=known_values,
    concrete_probe=known_values,
)
def test_known_verdicts_agree_with_python_for_every_completion(
    text: str, values: dict, concrete: dict, fact: object, probe: object,
    concrete_fact: object, concrete_probe: object,
) -> None:  # fmt: skip
    """Soundness: a known truth must match CPython for any filling-in of the unknowns."""
    facts = {k: v for k, v in (("fact", fact), ("probe()", probe)) if v is not UNKNOWN}
    try:
        r = evaluate(text, env(facts, **{k: v for k, v in values.items() if v is not UNKNOWN}))
    except UnsafeExpression:
        return
    if r.truth is UNKNOWN:
        return
    filled = {k: concrete[k] if v is UNKNOWN else v for k, v in values.items()}
    f = concrete_fact if fact is UNKNOWN else fact
    p = concrete_probe if probe is UNKNOWN else probe
    try:
        expected = _py_eval(text, filled, f, p)
    except Exception:
        return  # CPython raised where we were lenient (e.g. an unevaluated branch)
    assert bool(expected) is r.truth, (text, filled, f, p)
    if not any(v is UNKNOWN for v in (*values.values(), fact, probe)):
        assert r.value == expected or (r.value != r.value and expected != expected)


def test_a_decided_and_whose_operand_is_not_known_has_no_known_value() -> None:
    """``b and a`` with ``b`` unknown and ``a`` None is false, but Python returns ``b`` or
    ``a``, so ``a == (b and a)`` is not known (found by the soundness property above)."""
    r = evaluate("self.a == (self.b and self.a)", env({}, a=None))
    assert r.truth is UNKNOWN
    assert evaluate("not (self.b and self.a)", env({}, a=None)).truth is True
    assert evaluate("self.a == (self.b and self.a)", env({}, a=None, b=None)).truth is True
    # at the top, the decided truth is still the value
    assert evaluate("self.b and self.a", env({}, a=None)).value is False


def test_a_ternary_of_equally_truthy_branches_has_no_known_value_as_an_operand() -> None:
    """Both branches truthy but unequal: the ternary is truthy, its value is not known."""
    e = env({}, a=1, x=1, y=2)
    assert evaluate("self.x if self.b else self.y", e).truth is True
    assert evaluate("self.a == (self.x if self.b else self.y)", e).truth is UNKNOWN
    same = env({}, a=1, x=1, y=1)
    assert evaluate("self.a == (self.x if self.b else self.y)", same).truth is True


def test_a_facts_view_reads_each_attribute_as_its_own_fact() -> None:
    """``get_platform()`` is a view: ``p.is_sm90`` is the fact ``get_platform().is_sm90``,
    and an attribute no fact answers is unknown (and reported as such)."""
    from service.engine.expr.values import FactsView

    facts = {"get_platform()": FactsView("get_platform()"), "get_platform().is_sm90": True}
    e = env(facts, p=FactsView("get_platform()"))
    assert evaluate("self.p.is_sm90", e).truth is True
    r = evaluate("self.p.has_amx", e)
    assert r.truth is UNKNOWN and r.unknowns == ("get_platform().has_amx",)
    assert evaluate("[get_platform()][0].is_sm90", e).truth is True
    assert FactsView("get_platform()") == FactsView("get_platform()") != FactsView("platform")
