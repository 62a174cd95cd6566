"""Truths and values without atoms, reading only what decides them.

:func:`~service.engine.expr.interpreter.evaluate` evaluates every leaf of an
``and``/``or``/ternary, so that an answer can show each atom. The fold of earlier
writes only needs a guard's truth or a written value, and a memo keyed on the facts
an evaluation read (:class:`~service.engine.expr.trace.FactsTrace`) is reused more
often when fewer facts are read. :func:`decide` and :func:`decide_value` stop at the
first operand that decides an ``and``/``or`` (Kleene logic: ``UNKNOWN and False`` is
False) and evaluate only the branch of a ternary whose test is known. The operands
not read could not change the answer, so the result always equals ``evaluate``'s.
"""

from __future__ import annotations

import ast

from kb.conditions import check_depth, to_node
from service.engine.expr.interpreter import UNKNOWN, Env, Evaluator
from service.engine.expr.values import kleene, undecided_ternary

__all__ = ["decide", "decide_value"]


class _Deciding(Evaluator):
    """An evaluator whose and/or/ternary read their operands lazily when no atom is
    collected (with atoms collected, every leaf is evaluated as before)."""

    def struct(
        self, node: ast.expr, depth: int, collect: bool
    ) -> tuple[object, object, frozenset[int]]:
        if collect or not isinstance(node, (ast.BoolOp, ast.IfExp)):
            return super().struct(node, depth, collect)
        check_depth(depth)
        if isinstance(node, ast.IfExp):
            test = self.struct(node.test, depth + 1, False)
            if test[1] is not UNKNOWN:
                return self.struct(node.body if test[1] else node.orelse, depth + 1, False)
            body = self.struct(node.body, depth + 1, False)  # both branches decide it
            orelse = self.struct(node.orelse, depth + 1, False)
            return undecided_ternary(test, body, orelse)
        absorbing = isinstance(node.op, ast.Or)
        parts: list[tuple[object, object, frozenset[int]]] = []
        for operand in node.values:
            parts.append(self.struct(operand, depth + 1, False))
            if parts[-1][1] is absorbing:
                break
        t = kleene([p[1] for p in parts], absorbing)
        if t is UNKNOWN:
            return UNKNOWN, UNKNOWN, frozenset()
        # as in ``evaluate``: the deciding (or last) operand's value, when every operand
        # before it is known; else only the truth is known
        exact = all(p[1] is not UNKNOWN for p in parts[:-1])
        return (parts[-1][0] if exact else UNKNOWN), t, frozenset()


def _run(expr: str | ast.AST, env: Env) -> tuple[object, object]:
    node = to_node(expr, whitelist=True)
    value, t, _ = _Deciding(env).struct(node, 0, collect=False)
    return value, t


def decide(expr: str | ast.AST, env: Env) -> object:
    """``evaluate(expr, env).truth``, reading only the operands that decide it; raises
    only :class:`~kb.errors.UnsafeExpression`."""
    return _run(expr, env)[1]


def decide_value(expr: str | ast.AST, env: Env) -> object:
    """``evaluate(expr, env).value`` (a decided and/or/ternary whose operand is not known
    gives its truth, as ``evaluate`` does), reading only the operands that decide it."""
    value, t = _run(expr, env)
    return t if value is UNKNOWN else value
