"""The condition language of the KB: parsing, the whitelist, canonical text and the names read.

Checks' conditions, guards and rule cards' ``when``/``require`` are stored as
Python expression text; this module is how anything reads them without
running them. The engine's three-valued interpreter
(:mod:`service.engine.expr`) evaluates what this module parses.

Text is parsed with ``ast.parse(mode="eval")`` (cached), bounded in length, depth
and node count, and checked against a whitelist of node types (anything else
raises :class:`UnsafeExpression`). The helpers below also recognise argument-object
roots (``self``, ``cfg``, ``resolved_view(server_args)`` ...), split attribute
chains and spell expressions canonically. :mod:`service.engine.expr.interpreter`
builds its public functions on them.
"""

from __future__ import annotations

import ast
import copy
import functools
from collections.abc import Collection
from dataclasses import dataclass, field

from kb.errors import UnsafeExpression

__all__ = [
    "DEFAULT_ARG_OBJECTS", "MAX_DEPTH", "MAX_NODES", "MAX_TEXT", "VIEW_FUNCTIONS",
    "arg_attr_read", "attr_chain", "check_depth", "fact_key", "is_arg_root", "norm_text", "normalize",
    "referenced_names", "to_node", "unparse", "validate",
]  # fmt: skip

MAX_DEPTH = 64  # AST nesting; the interpreter recurses a few frames per level
MAX_NODES = 2000  # expression nodes per condition
MAX_TEXT = 20_000  # characters of source text

DEFAULT_ARG_OBJECTS: tuple[str, ...] = ("self", "server_args", "cfg", "args", "sa")
VIEW_FUNCTIONS = frozenset({"resolved_view", "resolving_view", "ResolvedView"})

# --------------------------------------------------------------------------- parsing

_OPERATORS = (
    ast.And, ast.Or, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.Not, ast.USub, ast.UAdd,
    ast.Invert, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot,
    ast.In, ast.NotIn, ast.Load,
)  # fmt: skip
_EXPRS = (
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Compare, ast.Call, ast.Constant,
    ast.Attribute, ast.Subscript, ast.Name, ast.List, ast.Tuple, ast.Set, ast.Dict,
    ast.JoinedStr, ast.FormattedValue, ast.Slice, ast.keyword, ast.Expression,
)  # fmt: skip


def check_depth(depth: int) -> None:
    """Refuse an expression nested deeper than :data:`MAX_DEPTH`."""
    if depth > MAX_DEPTH:
        raise UnsafeExpression(f"expression nested deeper than {MAX_DEPTH}")


def _is_dunder(name: str | None) -> bool:
    return name is not None and name.startswith("__") and name.endswith("__")


def _parse_text(text: str) -> ast.expr:
    if len(text) > MAX_TEXT:
        raise UnsafeExpression(f"expression longer than {MAX_TEXT} characters")
    src = text.strip()
    if not src:
        raise UnsafeExpression("empty expression")
    last: Exception | None = None
    # Continuation lines (as SGLang's source prints them) only parse inside brackets.
    for candidate in (src, f"(\n{src}\n)") if "\n" in src else (src,):
        try:
            return ast.parse(candidate, mode="eval").body
        except (SyntaxError, ValueError) as exc:
            last = exc
        except (RecursionError, MemoryError) as exc:
            raise UnsafeExpression("expression nested too deeply") from exc
    raise UnsafeExpression(f"not a Python expression: {last}", details={"text": text[:200]})


def _check_shape(root: ast.AST, whitelist: bool) -> None:
    """Iteratively bound depth and size; with ``whitelist``, refuse foreign syntax."""
    stack: list[tuple[ast.AST, int]] = [(root, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        check_depth(depth)
        if isinstance(node, _OPERATORS):
            continue
        count += 1
        if count > MAX_NODES:
            raise UnsafeExpression(f"expression has more than {MAX_NODES} nodes")
        if whitelist:
            _check_node(node)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _check_node(node: ast.AST) -> None:
    what = type(node).__name__
    if not isinstance(node, _EXPRS):
        raise UnsafeExpression(f"syntax not allowed in a condition: {what}", details={"node": what})
    if isinstance(node, ast.Name) and _is_dunder(node.id):
        raise UnsafeExpression(f"dunder name not allowed: {node.id}")
    if isinstance(node, ast.Attribute) and _is_dunder(node.attr):
        raise UnsafeExpression(f"dunder attribute not allowed: {node.attr}")
    if isinstance(node, ast.keyword) and node.arg is None:
        raise UnsafeExpression("**kwargs not allowed")
    if isinstance(node, ast.Dict) and any(k is None for k in node.keys):
        raise UnsafeExpression("dict unpacking not allowed")
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and any(
            isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("__")
            for a in node.args[1:2]
        )
    ):
        raise UnsafeExpression("getattr of a dunder attribute not allowed")


@functools.lru_cache(maxsize=16384)
def _parse(text: str, whitelist: bool) -> ast.expr:
    node = _parse_text(text)
    _check_shape(node, whitelist)
    _freeze(node)
    return node


# --------------------------------------------------------------- per-node memo
# Trees parsed from text are cached and never modified, so what is derived from
# one of their nodes (its text, its canonical text, its attribute chain) is kept
# on the node itself. A node is "frozen" when it carries its own id under
# _FROZEN: a copy (copy.deepcopy) carries a stale id, so copies, and nodes a
# caller built, are never served from these memos.

_FROZEN = "_triage_frozen"
_MEMO = "_triage_memo"

#: The argument objects a normalised text or attribute chain was derived for.
_ArgKey = tuple[str, ...] | frozenset[str]


@dataclass
class _NodeMemo:
    """What is memoised on one frozen node: its text, and per argument-object set its
    canonical text and its attribute chain (None: not a chain)."""

    unparse: str | None = None
    norm: dict[_ArgKey, str] = field(default_factory=dict)
    chain: dict[_ArgKey, tuple[bool, tuple[str, ...]] | None] = field(default_factory=dict)


def _arg_key(arg_objects: Collection[str]) -> _ArgKey:
    return arg_objects if isinstance(arg_objects, tuple | frozenset) else tuple(arg_objects)


def _freeze(root: ast.AST) -> None:
    for n in ast.walk(root):
        setattr(n, _FROZEN, id(n))


def _node_memo(node: ast.AST) -> _NodeMemo | None:
    """The memo of a frozen node (created on first use), else None."""
    if getattr(node, _FROZEN, None) != id(node):
        return None
    memo = node.__dict__.get(_MEMO)
    if not isinstance(memo, _NodeMemo):
        memo = _NodeMemo()
        setattr(node, _MEMO, memo)
    return memo


def unparse(node: ast.AST) -> str:
    """``ast.unparse(node)``, memoised on frozen nodes."""
    memo = _node_memo(node)
    if memo is None:
        return ast.unparse(node)
    if memo.unparse is None:
        memo.unparse = ast.unparse(node)
    return memo.unparse


def to_node(expr: str | ast.AST, whitelist: bool = True) -> ast.expr:
    """Parse (cached; callers never mutate the tree) or check a given node."""
    if isinstance(expr, str):
        return _parse(expr, whitelist)
    if isinstance(expr, ast.Expression):
        expr = expr.body
    if not isinstance(expr, ast.expr):
        raise TypeError(f"expected str or ast.expr, got {type(expr).__name__}")
    _check_shape(expr, whitelist)
    return expr


# ----------------------------------------------------------------------- normalising


def is_arg_root(node: ast.AST, arg_objects: Collection[str]) -> bool:
    """``self`` / ``cfg`` / ... or a transparent view call around one."""
    if isinstance(node, ast.Name):
        return node.id in arg_objects
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in VIEW_FUNCTIONS
        and bool(node.args)
        and is_arg_root(node.args[0], arg_objects)
    )


class _Normalizer(ast.NodeTransformer):
    def __init__(self, arg_objects: Collection[str]) -> None:
        self.arg_objects = arg_objects

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name("args", ast.Load()) if node.id in self.arg_objects else node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if is_arg_root(node, self.arg_objects):
            return ast.Name("args", ast.Load())
        return self.generic_visit(node)


def norm_text(node: ast.AST, arg_objects: Collection[str]) -> str:
    """``node``'s text with every argument-object root spelled ``args`` (memoised on frozen nodes)."""
    memo = _node_memo(node)
    key = _arg_key(arg_objects)
    if memo is not None:
        hit = memo.norm.get(key)
        if hit is not None:
            return hit
    text = ast.unparse(_Normalizer(arg_objects).visit(copy.deepcopy(node)))
    if memo is not None:
        memo.norm[key] = text
    return text


def attr_chain(node: ast.AST, arg_objects: Collection[str]) -> tuple[bool, list[str]] | None:
    """Split ``self.a.b()`` into ``(True, ["a", "b()"])``; ``envs.X.get()`` into ``(False, [...])``.

    Returns None when the chain is not made of attributes and method calls on a name.
    The answer is memoised on frozen nodes; the list returned is the caller's own.
    """
    memo = _node_memo(node)
    key = _arg_key(arg_objects)
    if memo is not None and key in memo.chain:
        hit = memo.chain[key]
        return None if hit is None else (hit[0], list(hit[1]))
    found = _attr_chain(node, arg_objects)
    if memo is not None:
        memo.chain[key] = None if found is None else (found[0], tuple(found[1]))
    return found


def _attr_chain(node: ast.AST, arg_objects: Collection[str]) -> tuple[bool, list[str]] | None:
    segs: list[str] = []
    cur = node
    while True:
        if is_arg_root(cur, arg_objects):
            return True, segs[::-1]
        if isinstance(cur, ast.Attribute):
            segs.append(cur.attr)
            cur = cur.value
        elif isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
            parts = [norm_text(a, arg_objects) for a in cur.args]
            parts += [f"{k.arg}={norm_text(k.value, arg_objects)}" for k in cur.keywords]
            segs.append(f"{cur.func.attr}({', '.join(parts)})")
            cur = cur.func.value
        elif isinstance(cur, ast.Name):
            segs.append(cur.id)
            return False, segs[::-1]
        else:
            return None


def arg_attr_read(node: ast.Call, arg_objects: Collection[str]) -> str | None:
    """``"x"`` for ``getattr(self, "x", ...)`` / ``hasattr(self, "x")`` on an argument object."""
    if not (
        isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and len(node.args) >= 2
        and is_arg_root(node.args[0], arg_objects)
    ):
        return None
    target = node.args[1]
    return (
        target.value if isinstance(target, ast.Constant) and isinstance(target.value, str) else None
    )


# --------------------------------------------------------------- validation and naming


def validate(expr: str | ast.AST) -> None:
    """Raise :class:`UnsafeExpression` unless ``expr`` parses and uses only whitelisted syntax."""
    to_node(expr, whitelist=True)


def normalize(expr: str | ast.AST, arg_objects: Collection[str] = DEFAULT_ARG_OBJECTS) -> str:
    """Canonical text: every argument-object root spelled ``args`` and ``ast.unparse`` layout.

    ``self.a is None``, ``cfg.a is None`` and ``resolved_view(server_args).a is None``
    all become ``args.a is None``. Only parsing and size limits apply, not the whitelist.
    """
    return norm_text(to_node(expr, whitelist=False), arg_objects)


def fact_key(expr: str | ast.AST, arg_objects: Collection[str] = DEFAULT_ARG_OBJECTS) -> str:
    """The key under which :class:`Env` ``facts`` are looked up for ``expr``.

    ``self.get_model_config().hf_config.x`` -> ``get_model_config().hf_config.x``;
    ``is_sm100_supported()`` -> ``is_sm100_supported()``; ``get_bool_env_var("X")``
    -> ``get_bool_env_var('X')``.
    """
    node = to_node(expr, whitelist=False)
    ch = attr_chain(node, arg_objects)
    return ".".join(ch[1]) if ch is not None and ch[1] else norm_text(node, arg_objects)


def referenced_names(
    expr: str | ast.AST, arg_objects: Collection[str] = DEFAULT_ARG_OBJECTS
) -> frozenset[str]:
    """The ``attrs`` keys ``expr`` reads (``self.X``, ``getattr(cfg, "X")``), without evaluating."""
    if isinstance(expr, str):
        return _referenced_names_text(expr, frozenset(arg_objects))
    return _referenced_names(expr, arg_objects)


@functools.lru_cache(maxsize=16384)
def _referenced_names_text(expr: str, arg_objects: frozenset[str]) -> frozenset[str]:
    return _referenced_names(expr, arg_objects)


def _referenced_names(expr: str | ast.AST, arg_objects: Collection[str]) -> frozenset[str]:
    root = to_node(expr, whitelist=False)
    funcs = {id(n.func) for n in ast.walk(root) if isinstance(n, ast.Call)}
    names: set[str] = set()
    for n in ast.walk(root):
        if (
            isinstance(n, ast.Attribute)
            and id(n) not in funcs
            and is_arg_root(n.value, arg_objects)
        ):
            names.add(n.attr)
        elif isinstance(n, ast.Call):
            attr = arg_attr_read(n, arg_objects)
            if attr is not None:
                names.add(attr)
    return frozenset(names)
