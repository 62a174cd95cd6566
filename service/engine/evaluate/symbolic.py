"""What would SGLang choose? Interpret small pure helpers symbolically.

Some values a check depends on are chosen by SGLang itself, e.g.
``auto_choose_speculative_params(self)`` returns ``(3, 1, 4)`` for
DeepSeek-V3. :func:`call_value` follows such a call into the release's own
source and walks its body statement by statement: simple assignments bind
local names to *expressions* (substituted, not executed), ``if``/``elif``
chains are decided with the three-valued evaluator, and the first ``return``
reached gives the value. Anything else (loops, side effects, an undecidable
branch) gives up with ``UNKNOWN``. Nothing is executed.
"""

from __future__ import annotations

import ast
from typing import Any

from kb.store import Store
from service.engine.cache import cached, release_key
from service.engine.evaluate import chain
from service.engine.expr.interpreter import UNKNOWN, Env, evaluate

_MAX_STEPS = 200
_ARG_NAMES = ("self", "server_args", "cfg", "args")


def function_named(store: Store, version: str, name: str) -> dict[str, Any] | None:
    """The first function called ``name`` in the validation files (cached per release; read-only)."""

    def build() -> dict[str, Any] | None:
        for row in store.functions_named(version, name):
            if row["path"].startswith(chain.VALIDATION_PATHS):
                return row
        return None

    return cached(release_key(store, version, f"function-named:{name}"), build)


def _subst(expr: ast.expr, local: dict[str, ast.expr]) -> str:
    class T(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in local:
                return local[node.id]
            return node

    return ast.unparse(T().visit(ast.parse(ast.unparse(expr), mode="eval")).body)


def _run(body: list[ast.stmt], local: dict[str, ast.expr], env: Env, steps: list[int]) -> object:
    for stmt in body:
        steps[0] += 1
        if steps[0] > _MAX_STEPS:
            return UNKNOWN
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            local[stmt.targets[0].id] = ast.parse(_subst(stmt.value, local), mode="eval").body
            continue
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                return None
            return evaluate(_subst(stmt.value, local), env).value
        if isinstance(stmt, ast.If):
            truth = evaluate(_subst(stmt.test, local), env).truth
            if truth is UNKNOWN:
                return UNKNOWN
            result = _run(stmt.body if truth else stmt.orelse, local, env, steps)
            if result is not _FALLTHROUGH:
                return result
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "logger":
                continue  # logging has no effect on the value
        return UNKNOWN
    return _FALLTHROUGH


class _Fallthrough:
    pass


_FALLTHROUGH = _Fallthrough()


def call_value(store: Store, version: str, call_src: str, env: Env) -> object:
    """The value ``call_src`` (e.g. ``auto_choose_speculative_params(self)``) returns, or UNKNOWN."""
    try:
        call = ast.parse(call_src.strip(), mode="eval").body
    except SyntaxError:
        return UNKNOWN
    if not isinstance(call, ast.Call):
        return UNKNOWN
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if not name:
        return UNKNOWN
    fn = function_named(store, version, name)
    if fn is None:
        return UNKNOWN
    node = chain.function_ast(store, version, fn)
    if node is None:
        return UNKNOWN
    local: dict[str, ast.expr] = {}
    params = [a.arg for a in node.args.args]
    for param, arg in zip(params, call.args, strict=False):
        if param in _ARG_NAMES or (isinstance(arg, ast.Name) and arg.id in _ARG_NAMES):
            continue  # the argument object keeps meaning the argument object
        local[param] = arg
    result = _run(node.body, local, env, [0])
    return UNKNOWN if result is _FALLTHROUGH else result
