"""Read a validation function's source into condition text the evaluator can decide.

A condition as SGLang wrote it often reads names the evaluator cannot see:

* local variables (``model_arch = ...``, ``prefill, decode = attention_backends_of(cfg)``),
  replaced by the expressions assigned to them earlier in the function
  (:func:`locals_before`, :func:`substitute`; tuple unpacking of a tuple literal, or of a
  small helper returning one, binds element by element);
* small pure helpers (``attn_dp_enabled_of(cfg)``: a docstring, imports, simple
  assignments and one ``return``), and such methods called on the argument object
  (``self._resolved_attention_backends()``), inlined with their parameters bound to the
  call's arguments (:func:`inline_helpers`), so the attributes they read are read by the
  condition itself (and memo keys, folded writes and fixes see them);
* the 0.5.19+ resolution reads (:mod:`service.engine.evaluate.resolution`).

Everything is text-to-text over Python's ``ast``; nothing is executed.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from typing import Any

from kb.conditions import MAX_TEXT, VIEW_FUNCTIONS, fact_key, validate
from kb.errors import UnsafeExpression
from kb.store import Store
from service.engine.cache import cached, release_key
from service.engine.evaluate import chain

_MAX_SUBST_DEPTH = 3
_MAX_INLINE_DEPTH = 2
_ARG_NAMES = frozenset({"self", "server_args", "cfg", "args"})


def locals_before(
    store: Store, version: str, fn: dict[str, Any] | None, line: int
) -> dict[str, ast.expr]:
    """Simple ``name = expr`` assignments in ``fn`` before ``line`` (last one wins; cached).

    ``a, b = (x, y)`` binds ``a`` and ``b``; ``a, b = helper(...)`` does too when the
    helper inlines (:func:`inline_helpers`) to a tuple of the same length.
    """
    if fn is None:
        return {}
    return cached(
        release_key(store, version, f"locals:{fn['path']}:{fn['start_line']}:{line}"),
        lambda: _scan_locals(store, version, fn, line),
    )


def _scan_locals(store: Store, version: str, fn: dict[str, Any], line: int) -> dict[str, ast.expr]:
    """Walk ``fn``'s statements up to ``line`` in order, binding each local to an expression
    over the function's inputs (substituted eagerly). A local assigned in only one branch
    of an ``if`` passed before the line becomes ``(then if test else before)``; a branch
    that raises or returns is not taken on the way to the line; a name bound in a loop,
    ``try`` or ``with`` passed before the line is dropped (its value is not known)."""
    node = chain.function_ast(store, version, fn)
    if node is None:
        return {}
    env: dict[str, ast.expr] = {}
    _walk_block(store, version, node.body, env, line - (fn["start_line"] - 1))
    return env


def _ends(block: list[ast.stmt]) -> bool:
    return bool(block) and isinstance(block[-1], ast.Raise | ast.Return | ast.Continue | ast.Break)


def _contains(stmt: ast.stmt, line: int) -> bool:
    end = getattr(stmt, "end_lineno", None) or stmt.lineno
    return stmt.lineno <= line <= end


def _eager(expr: ast.expr, env: dict[str, ast.expr]) -> ast.expr:
    if not env:
        return expr
    try:
        text = ast.unparse(expr)
    except ValueError:  # Python 3.11 cannot unparse some f-strings (a backslash inside {})
        return expr
    return ast.parse(substitute(text, env), mode="eval").body


def _walk_block(
    store: Store, version: str, body: list[ast.stmt], env: dict[str, ast.expr], line: int
) -> None:
    """Bind ``env`` in place from the statements of ``body`` before ``line`` (relative)."""
    for stmt in body:
        if stmt.lineno >= line:
            return
        inside = _contains(stmt, line)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                if target.id not in _ARG_NAMES:
                    env[target.id] = _eager(stmt.value, env)
            elif isinstance(target, ast.Tuple) and all(
                isinstance(e, ast.Name) for e in target.elts
            ):
                items = _tuple_items(store, version, _eager(stmt.value, env), len(target.elts))
                for elt in target.elts:
                    assert isinstance(elt, ast.Name)
                    env.pop(elt.id, None)
                for elt, value in zip(target.elts, items or [], strict=False):
                    assert isinstance(elt, ast.Name)
                    if elt.id not in _ARG_NAMES:
                        env[elt.id] = value
            else:
                for name in _bound_names(stmt):
                    env.pop(name, None)
        elif isinstance(stmt, ast.If):
            test = _eager(stmt.test, env)
            if inside:  # the line is in one branch: that branch was taken
                branch = stmt.body if _contains_any(stmt.body, line) else stmt.orelse
                _walk_block(store, version, branch, env, line)
                return
            then, other = dict(env), dict(env)
            _walk_block(store, version, stmt.body, then, line)
            _walk_block(store, version, stmt.orelse, other, line)
            if _ends(stmt.body) and not _ends(stmt.orelse):
                env.clear()
                env.update(other)
                continue
            if _ends(stmt.orelse) and not _ends(stmt.body):
                env.clear()
                env.update(then)
                continue
            for name in set(then) | set(other):
                a, b = then.get(name), other.get(name)
                if a is None or b is None:
                    env.pop(name, None)
                elif a is b:
                    env[name] = a
                else:
                    env[name] = ast.IfExp(test, a, b)
        elif inside and isinstance(stmt, ast.With | ast.Try | ast.For | ast.While):
            for sub in ast.walk(stmt):
                if (
                    isinstance(sub, ast.stmt)
                    and sub is not stmt
                    and sub.lineno < line
                    and isinstance(stmt, ast.For | ast.While)
                ):
                    for name in _bound_names(sub):
                        env.pop(name, None)
            if isinstance(stmt, ast.For | ast.While):
                return
            _walk_block(store, version, stmt.body, env, line)
            return
        else:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.stmt):
                    for name in _bound_names(sub):
                        env.pop(name, None)


def _contains_any(block: list[ast.stmt], line: int) -> bool:
    return any(_contains(s, line) for s in block)


def _tuple_items(store: Store, version: str, value: ast.expr, n: int) -> list[ast.expr] | None:
    if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == n:
        return list(value.elts)
    if isinstance(value, ast.Call):
        try:
            inlined = ast.parse(
                inline_helpers(store, version, ast.unparse(value)), mode="eval"
            ).body
        except SyntaxError:
            return None
        if isinstance(inlined, ast.Tuple) and len(inlined.elts) == n:
            return list(inlined.elts)
    return None


class _Subst(ast.NodeTransformer):
    def __init__(self, local: dict[str, ast.expr], keep: Collection[str]) -> None:
        self.local, self.keep, self.depth = local, keep, 0

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.local and node.id not in self.keep and self.depth < _MAX_SUBST_DEPTH:
            self.depth += 1
            try:
                substituted: ast.AST = self.visit(
                    ast.parse(ast.unparse(self.local[node.id]), mode="eval").body
                )
                return substituted
            finally:
                self.depth -= 1
        return node


def substitute(condition: str, local: dict[str, ast.expr], keep: Collection[str] = ()) -> str:
    """``condition`` with local variables replaced by their assigned expressions.

    Names in ``keep`` (those a fact supplies, e.g. ``model_arch``) stay as they are.
    """
    if not local:
        return condition
    try:
        tree = ast.parse(condition.strip(), mode="eval")
    except SyntaxError:
        return condition
    new = _Subst(local, keep).visit(tree)  # keep is only asked `name in keep`
    try:
        return ast.unparse(new)
    except ValueError:  # an f-string Python 3.11 cannot unparse: left as written
        return condition


# ----------------------------------------------------------------------------- helpers


def _helper_body(
    store: Store, version: str, name: str
) -> tuple[list[str], list[Any], ast.expr] | None:
    """(parameter names, their defaults aligned right, returned expression with the body's
    locals substituted) of a pure single-return helper ``name`` of the validation files."""

    def build() -> tuple[list[str], list[Any], ast.expr] | None:
        rows = [
            r
            for r in store.functions_named(version, name)
            if r["path"].startswith(chain.VALIDATION_PATHS)
        ]
        if len(rows) != 1:  # unknown or ambiguous: not inlined
            return None
        node = chain.function_ast(store, version, rows[0])
        if (
            node is None
            or node.args.vararg
            or node.args.kwarg
            or node.args.kwonlyargs
            or node.decorator_list
        ):
            return None
        local: dict[str, ast.expr] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                continue
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                local[stmt.targets[0].id] = ast.parse(
                    substitute(ast.unparse(stmt.value), local), mode="eval"
                ).body
                continue
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                ret = ast.parse(substitute(ast.unparse(stmt.value), local), mode="eval").body
                params = [a.arg for a in node.args.posonlyargs + node.args.args]
                defaults = [
                    d.value if isinstance(d, ast.Constant) else _NO_DEFAULT
                    for d in node.args.defaults
                ]
                return params, defaults, ret
            return None
        return None

    return cached(release_key(store, version, f"helper-body:{name}"), build)


_NO_DEFAULT = object()


class _Inliner(ast.NodeTransformer):
    def __init__(self, store: Store, version: str, keep: Collection[str], depth: int) -> None:
        self.store, self.version, self.keep, self.depth = store, version, keep, depth

    def visit_Call(self, call: ast.Call) -> ast.AST:
        node = self.generic_visit(call)
        callee = _callee(node) if isinstance(node, ast.Call) else None
        if (
            not isinstance(node, ast.Call)
            or callee is None
            or callee[0] in VIEW_FUNCTIONS  # a view of the arguments: the evaluator reads it
            or self.depth >= _MAX_INLINE_DEPTH
            or any(k.arg is None for k in node.keywords)
            or any(isinstance(a, ast.Starred) for a in node.args)
        ):
            return node
        try:
            if fact_key(node) in self.keep:
                return node  # a fact answers it as it is
        except Exception:  # unparsable: not a fact
            pass
        name, receiver = callee
        body = _helper_body(self.store, self.version, name)
        if body is None:
            return node
        params, defaults, ret = body
        args = list(node.args)
        if receiver is not None:  # ``self.helper(...)``: the method's ``self`` is the receiver
            if not params or params[0] != "self":
                return node
            args.insert(0, receiver)
        bound: dict[str, ast.expr] = dict(zip(params, args, strict=False))
        for kw in node.keywords:
            assert kw.arg is not None
            bound[kw.arg] = kw.value
        for param, default in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            if param not in bound and default is not _NO_DEFAULT:
                bound[param] = ast.Constant(default)
        if set(params) - set(bound) or set(bound) - set(params):
            return node
        text = ast.unparse(_Bind(bound).visit(ast.parse(ast.unparse(ret), mode="eval")).body)
        try:
            inner = ast.parse(text, mode="eval").body
        except SyntaxError:
            return node
        inlined: ast.AST = _Inliner(self.store, self.version, self.keep, self.depth + 1).visit(
            inner
        )
        return inlined


def _callee(call: ast.Call) -> tuple[str, ast.expr | None] | None:
    """(the name called, the receiver of a method called on one of the function's argument
    objects, such as ``self._resolved_attention_backends()``); ``None`` for other calls."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id, None
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in _ARG_NAMES
    ):
        return func.attr, func.value
    return None


class _Bind(ast.NodeTransformer):
    def __init__(self, bound: dict[str, ast.expr]) -> None:
        self.bound = bound

    def visit_Name(self, node: ast.Name) -> ast.AST:
        value = self.bound.get(node.id)
        return ast.parse(ast.unparse(value), mode="eval").body if value is not None else node


def inline_helpers(store: Store, version: str, text: str, keep: Collection[str] = ()) -> str:
    """``text`` with calls of pure single-return helpers replaced by what they return.

    A helper is inlined only when exactly one function of that name exists in the
    release's validation files, its parameters are all bound by the call, and the
    result is still a valid, whitelisted condition; calls a fact answers (``keep``
    holds fact keys) stay. Otherwise the text is returned unchanged.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return text
    if not any(isinstance(n, ast.Call) and _callee(n) is not None for n in ast.walk(tree)):
        return text
    new = ast.unparse(_Inliner(store, version, keep, 0).visit(tree))  # membership only
    if new == ast.unparse(ast.parse(text.strip(), mode="eval")) or len(new) > MAX_TEXT:
        return text
    try:
        validate(new)
    except (UnsafeExpression, SyntaxError, ValueError):
        return text
    return new


def _bound_names(stmt: ast.stmt) -> list[str]:
    """Names a statement binds itself (not those of statements nested in it)."""
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
        targets = [stmt.target]
    elif isinstance(stmt, ast.With | ast.AsyncWith):
        targets = [i.optional_vars for i in stmt.items if i.optional_vars is not None]
    out: list[str] = []
    for t in targets:
        out += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
    return out
