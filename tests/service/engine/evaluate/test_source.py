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
