"""The arithmetic of a check's test in plain words, before and after a fix.

A shape check such as ``moe_intermediate_size // (tp_size // ep_size // moe_dp_size) %
weight_block_size_n != 0`` is explained by its numbers: "tp_size 8 // ep_size 1 = 8;
8 // moe_dp_size 1 = 8; moe_intermediate_size 1536 // 8 = 192; 192 % weight_block_size_n
128 = 64; 64 != 0 holds", and for the recommended fix "With `--ep-size 2`: tp_size 8 //
ep_size 2 = 4; …; 384 % weight_block_size_n 128 = 0; 0 != 0 fails". Every number is
computed by the three-valued evaluator from the same flags and facts the evaluation
used; a step whose operands are not both known numbers is left out.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from service.engine.expr.interpreter import UNKNOWN, Env, Value, evaluate

__all__ = ["arithmetic_steps", "sentence"]

_OPS: dict[type[ast.operator], str] = {
    ast.FloorDiv: "//",
    ast.Div: "/",
    ast.Mod: "%",
    ast.Mult: "×",
    ast.Add: "+",
    ast.Sub: "-",
}
_CMPS: dict[type[ast.cmpop], str] = {
    ast.NotEq: "!=",
    ast.Eq: "==",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}
#: steps shown for one test
MAX_STEPS = 8


def _number(node: ast.expr, env: Env) -> object:
    try:
        value = evaluate(ast.unparse(node), env).value
    except Exception:  # not computable: no step
        return UNKNOWN
    if isinstance(value, bool) or not isinstance(value, int | float):
        return UNKNOWN
    return value


def _named(node: ast.expr, value: object) -> str:
    """``tp_size 8`` for a flag or a named value, the bare number for a computed one."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.attr} {value}"
    if isinstance(node, ast.Name):
        return f"{node.id} {value}"
    return str(value)


def arithmetic_steps(
    condition: str, attrs: Mapping[str, Value], facts: Mapping[str, Value]
) -> list[str]:
    """The arithmetic steps of ``condition``, innermost first (``[]`` when it has none
    whose operands are known): each ``a op b = c``, and each comparison of a computed
    number with ``holds``/``fails``."""
    try:
        tree = ast.parse(condition.strip(), mode="eval")
    except SyntaxError:
        return []
    env = Env(attrs, facts)
    steps: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            visit(child)
        if len(steps) >= MAX_STEPS:
            return
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right, whole = (
                _number(node.left, env),
                _number(node.right, env),
                _number(node, env),
            )
            if UNKNOWN not in (left, right, whole):
                steps.append(
                    f"{_named(node.left, left)} {_OPS[type(node.op)]} "
                    f"{_named(node.right, right)} = {whole}"
                )
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and type(node.ops[0]) in _CMPS
            and isinstance(node.left, ast.BinOp)
        ):
            left, right = _number(node.left, env), _number(node.comparators[0], env)
            if UNKNOWN not in (left, right):
                truth = evaluate(ast.unparse(node), env).truth
                word = "holds" if truth is True else "fails" if truth is False else "is undecided"
                steps.append(f"{left} {_CMPS[type(node.ops[0])]} {right} {word}")

    visit(tree.body)
    return steps


def sentence(
    condition: str | None,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    fix: tuple[str, Mapping[str, Value]] | None = None,
) -> str | None:
    """The arithmetic of the check's own test ``condition`` in plain words (None when it
    has no computable arithmetic): the steps with the crash's values, then with the
    recommended fix's (``fix``: its flags as the user would type them, and the attributes
    after it)."""
    if not condition:
        return None
    steps = arithmetic_steps(condition, attrs, facts)
    if not steps:
        return None
    text = f"{'; '.join(steps)}."
    if fix is not None:
        after = arithmetic_steps(condition, fix[1], facts)
        if after and after != steps:
            text += f" With `{fix[0]}`: {'; '.join(after)}."
    return text
