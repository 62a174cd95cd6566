"""Local variables substituted into a check's condition (``service.engine.evaluate.source``)."""

from __future__ import annotations

import ast
import sys

import pytest

from service.engine.evaluate.source import substitute


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def test_a_local_is_replaced_by_its_assigned_expression() -> None:
    assert substitute("n > 1 and x", {"n": _expr("self.tp_size * 2")}) == (
        "self.tp_size * 2 > 1 and x"
    )


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 unparses any f-string")
def test_an_f_string_python_cannot_unparse_leaves_the_condition_as_written() -> None:
    # substituting sep = "\\d" (a regex) puts a backslash inside an f-string's braces,
    # which Python 3.11 cannot write back as source: the condition is kept unsubstituted
    cond = "f'{sep.join(names)}' != ''"
    assert substitute(cond, {"sep": _expr(r'"\\d"')}) == cond


def test_a_method_called_on_the_arguments_is_inlined_into_the_locals_it_binds(store) -> None:
    # 0.5.16 unpacks `prefill_backend, decode_backend = self._resolved_attention_backends()`,
    # a method returning `attention_backends_of(resolved_view(self))`: each local is then the
    # backend it names (the view kept as the evaluator reads it), not an unknown name
    from service.engine.evaluate import source

    release = "0.5.16"
    if not store.functions_named(release, "_resolved_attention_backends"):
        pytest.skip("no 0.5.16 method _resolved_attention_backends in this KB")
    checks = [
        c
        for c in store.checks(release, path="sglang/srt/server_args.py")
        if c.condition and "prefill_backend" in c.condition
    ]
    assert checks
    for check in checks:
        fn = store.functions_at(release, check.path, check.start_line)[0]
        local = source.locals_before(store, release, fn, check.start_line)
        prefill = ast.unparse(local["prefill_backend"])
        assert "resolved_view(self).prefill_attention_backend" in prefill
        assert "resolved_view(self).attention_backend" in prefill
        assert "_resolved_attention_backends" not in prefill
    # a call that is no method of the arguments stays as written
    text = "other.helper_of(self) == 1"
    assert source.inline_helpers(store, release, text) == text
