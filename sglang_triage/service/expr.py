"""A safe, three-valued interpreter for the conditions in SGLang's ``assert``/``raise``.

Nothing here calls ``eval``/``exec``/``compile``: text is parsed with
``ast.parse(mode="eval")``, checked against a whitelist of node types (anything
else raises :class:`UnsafeExpression`), and then interpreted node by node.

Values are three-valued. :data:`UNKNOWN` stands for "we cannot tell" and follows
Kleene logic: ``False and UNKNOWN`` is ``False``, ``True or UNKNOWN`` is
``True``, and everything else touching ``UNKNOWN`` (comparisons, arithmetic,
``is None``, ``in``, calls) is ``UNKNOWN``. ``UNKNOWN`` refuses ``bool()`` so
that Python's own truthiness can never decide on it by accident.

Names are looked up in an :class:`Env`: attributes of the argument objects
(``self.X``, ``server_args.X``, ``cfg.X``, ``resolved_view(server_args).X`` ...)
come from ``attrs``; everything else (bare names, zero-argument predicates such
as ``is_sm100_supported()``, deeper chains such as
``model_config.hf_config.architectures``) from ``facts`` or ``functions``.
Every lookup is recorded with its :class:`Provenance` so that a verdict can be
explained leaf by leaf (:class:`Atom`).
"""

from __future__ import annotations

import ast
import copy
import functools
import operator as op_
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sglang_triage.errors import UnsafeExpression

__all__ = [
    "UNKNOWN", "ArgsView", "Atom", "Env", "Provenance", "Result", "Value", "evaluate",
    "fact_key", "normalize", "referenced_names", "truth", "validate",
]  # fmt: skip

MAX_DEPTH = 64  # AST nesting; the interpreter recurses a few frames per level
MAX_NODES = 2000  # expression nodes per condition
MAX_TEXT = 20_000  # characters of source text
MAX_SIZE = 10_000  # elements/characters of any value the evaluator builds
MAX_INT_BITS = 10_000  # bits of any integer the evaluator builds

DEFAULT_ARG_OBJECTS: tuple[str, ...] = ("self", "server_args", "cfg", "args", "sa")
VIEW_FUNCTIONS = frozenset({"resolved_view", "resolving_view", "ResolvedView"})


class _Unknown:
    """Type of the :data:`UNKNOWN` singleton. It has no truth value on purpose."""

    def __repr__(self) -> str:
        return "unknown"

    __str__ = __repr__

    def __bool__(self) -> bool:
        raise TypeError("UNKNOWN has no truth value; compare with `is UNKNOWN`")

    def __reduce__(self) -> str:  # pickle/copy give back the singleton
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()

ProvenanceKind = Literal["flag", "default", "write", "fact", "derived", "unknown"]


@dataclass(frozen=True)
class Provenance:
    """Where a value came from, e.g. ``Provenance("flag", "--page-size 16")``."""

    kind: ProvenanceKind
    detail: str = ""


@dataclass(frozen=True)
class Value:
    """A value (JSON-ish, or :data:`UNKNOWN`) together with its provenance."""

    value: object
    provenance: Provenance


_GIVEN = Provenance("derived", "given without provenance")


def _as_value(v: object) -> Value:
    return v if isinstance(v, Value) else Value(v, _GIVEN)


class Env:
    """What names mean while evaluating.

    ``attrs`` are the attributes of the server-args object (keyed ``"page_size"``);
    ``facts`` are everything else, keyed by canonical text (see :func:`fact_key`):
    ``"model_arch"``, ``"is_sm100_supported()"``, ``"model_config.hf_config.architectures"``.
    ``functions`` are trusted helpers called with evaluated arguments (an
    argument object arrives as an :class:`ArgsView`). Entries that are not
    :class:`Value` are wrapped with a "given without provenance" provenance.
    """

    def __init__(
        self,
        attrs: Mapping[str, Value],
        facts: Mapping[str, Value] | None = None,
        functions: Mapping[str, Callable[..., object]] | None = None,
        arg_objects: Collection[str] = DEFAULT_ARG_OBJECTS,
    ) -> None:
        self.attrs: dict[str, Value] = {k: _as_value(v) for k, v in attrs.items()}
        self.facts: dict[str, Value] = {k: _as_value(v) for k, v in (facts or {}).items()}
        self.functions: dict[str, Callable[..., object]] = dict(functions or {})
        self.arg_objects: frozenset[str] = frozenset(arg_objects)


class ArgsView:
    """An argument object used as a value (``self``, ``resolved_view(server_args)``).

    Attribute reads return the raw value from ``attrs`` (``UNKNOWN`` if missing)
    and are recorded as inputs of the leaf being evaluated.
    """

    __slots__ = ("_ev",)

    def __init__(self, ev: _Evaluator) -> None:
        self._ev = ev

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ev.attr(name)

    def __repr__(self) -> str:
        return "<server args>"


@dataclass(frozen=True)
class Atom:
    """A leaf of the boolean structure, its truth value and the lookups it made."""

    text: str
    value: object
    inputs: tuple[tuple[str, object, Provenance], ...]


@dataclass(frozen=True)
class Result:
    """Outcome of :func:`evaluate`.

    ``value`` is the expression's value; where Kleene logic decides the truth of
    an ``and``/``or``/ternary without telling which operand Python would return,
    ``value`` is that decided bool. ``truth`` is True/False/UNKNOWN. ``unknowns``
    lists the UNKNOWN inputs of the atoms whose UNKNOWN actually propagated to
    the result (empty when the result is known).
    """

    value: object
    truth: object
    atoms: tuple[Atom, ...]
    names: frozenset[str]
    unknowns: tuple[str, ...]


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


def _is_dunder(name: str | None) -> bool:
    return bool(name) and name.startswith("__") and name.endswith("__")  # type: ignore[union-attr]


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
        if depth > MAX_DEPTH:
            raise UnsafeExpression(f"expression nested deeper than {MAX_DEPTH}")
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


@functools.lru_cache(maxsize=1024)
def _parse(text: str, whitelist: bool) -> ast.expr:
    node = _parse_text(text)
    _check_shape(node, whitelist)
    return node


def _to_node(expr: str | ast.AST, whitelist: bool = True) -> ast.expr:
    """Parse (cached; callers never mutate the tree) or check a given node."""
    if isinstance(expr, str):
        return _parse(expr, whitelist)
    if isinstance(expr, ast.Expression):
        expr = expr.body
    if not isinstance(expr, ast.expr):
        raise TypeError(f"expected str or ast.expr, got {type(expr).__name__}")
    _check_shape(expr, whitelist)
    return expr


def validate(expr: str | ast.AST) -> None:
    """Raise :class:`UnsafeExpression` unless ``expr`` parses and uses only whitelisted syntax."""
    _to_node(expr, whitelist=True)


# ----------------------------------------------------------------------- normalising


def _is_arg_root(node: ast.AST, arg_objects: Collection[str]) -> bool:
    """``self`` / ``cfg`` / ... or a transparent view call around one."""
    if isinstance(node, ast.Name):
        return node.id in arg_objects
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in VIEW_FUNCTIONS
        and bool(node.args)
        and _is_arg_root(node.args[0], arg_objects)
    )


class _Normalizer(ast.NodeTransformer):
    def __init__(self, arg_objects: Collection[str]) -> None:
        self.arg_objects = arg_objects

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name("args", ast.Load()) if node.id in self.arg_objects else node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if _is_arg_root(node, self.arg_objects):
            return ast.Name("args", ast.Load())
        return self.generic_visit(node)


def _norm_text(node: ast.AST, arg_objects: Collection[str]) -> str:
    return ast.unparse(_Normalizer(arg_objects).visit(copy.deepcopy(node)))


def normalize(expr: str | ast.AST, arg_objects: Collection[str] = DEFAULT_ARG_OBJECTS) -> str:
    """Canonical text: every argument-object root spelled ``args`` and ``ast.unparse`` layout.

    ``self.a is None``, ``cfg.a is None`` and ``resolved_view(server_args).a is None``
    all become ``args.a is None``. Only parsing and size limits apply, not the whitelist.
    """
    return _norm_text(_to_node(expr, whitelist=False), arg_objects)


def _chain(node: ast.AST, arg_objects: Collection[str]) -> tuple[bool, list[str]] | None:
    """Split ``self.a.b()`` into ``(True, ["a", "b()"])``; ``envs.X.get()`` into ``(False, [...])``.

    Returns None when the chain is not made of attributes and method calls on a name.
    """
    segs: list[str] = []
    cur = node
    while True:
        if _is_arg_root(cur, arg_objects):
            return True, segs[::-1]
        if isinstance(cur, ast.Attribute):
            segs.append(cur.attr)
            cur = cur.value
        elif isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
            parts = [_norm_text(a, arg_objects) for a in cur.args]
            parts += [f"{k.arg}={_norm_text(k.value, arg_objects)}" for k in cur.keywords]
            segs.append(f"{cur.func.attr}({', '.join(parts)})")
            cur = cur.func.value
        elif isinstance(cur, ast.Name):
            segs.append(cur.id)
            return False, segs[::-1]
        else:
            return None


def fact_key(expr: str | ast.AST, arg_objects: Collection[str] = DEFAULT_ARG_OBJECTS) -> str:
    """The key under which :class:`Env` ``facts`` are looked up for ``expr``.

    ``self.get_model_config().hf_config.x`` -> ``get_model_config().hf_config.x``;
    ``is_sm100_supported()`` -> ``is_sm100_supported()``; ``get_bool_env_var("X")``
    -> ``get_bool_env_var('X')``.
    """
    node = _to_node(expr, whitelist=False)
    ch = _chain(node, arg_objects)
    return ".".join(ch[1]) if ch is not None and ch[1] else _norm_text(node, arg_objects)


def referenced_names(
    expr: str | ast.AST, arg_objects: Collection[str] = DEFAULT_ARG_OBJECTS
) -> frozenset[str]:
    """The ``attrs`` keys ``expr`` reads (``self.X``, ``getattr(cfg, "X")``), without evaluating."""
    root = _to_node(expr, whitelist=False)
    funcs = {id(n.func) for n in ast.walk(root) if isinstance(n, ast.Call)}
    names: set[str] = set()
    for n in ast.walk(root):
        if (
            isinstance(n, ast.Attribute)
            and id(n) not in funcs
            and _is_arg_root(n.value, arg_objects)
        ):
            names.add(n.attr)
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("getattr", "hasattr")
            and len(n.args) >= 2
            and _is_arg_root(n.args[0], arg_objects)
            and isinstance(n.args[1], ast.Constant)
            and isinstance(n.args[1].value, str)
        ):
            names.add(n.args[1].value)
    return frozenset(names)


# -------------------------------------------------------------------- value helpers


def _opaque(v: object) -> bool:
    return v is UNKNOWN or isinstance(v, ArgsView)


def _walk_value(v: object, budget: int = MAX_SIZE * 4) -> tuple[int, bool]:
    """(flat size capped just above the budget, contains UNKNOWN/ArgsView anywhere)."""
    size, unknown, stack = 0, False, [v]
    while stack and size <= budget:
        x = stack.pop()
        if _opaque(x):
            unknown, size = True, size + 1
        elif isinstance(x, (str, bytes)):
            size += len(x)
        elif isinstance(x, dict):
            size += len(x)
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set, frozenset)):
            size += len(x)
            stack.extend(x)
        else:
            size += 1
    return size, unknown or bool(stack)


def _has_unknown(v: object) -> bool:
    return _walk_value(v)[1]


def _bounded(v: object) -> object:
    """``v`` unless it is too large to keep (then UNKNOWN)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if v.bit_length() <= MAX_INT_BITS else UNKNOWN
    if isinstance(v, (str, bytes, list, tuple, set, frozenset, dict)):
        return v if _walk_value(v, MAX_SIZE)[0] <= MAX_SIZE else UNKNOWN
    return v


def _truth(v: object) -> object:
    """Python truthiness of a known value; UNKNOWN for UNKNOWN or when ``bool()`` fails."""
    if v is UNKNOWN:
        return UNKNOWN
    if isinstance(v, ArgsView):
        return True
    try:
        return bool(v)
    except Exception:
        return UNKNOWN


def _kleene(truths: list[object], absorbing: bool) -> object:
    """``and`` (absorbing False) / ``or`` (absorbing True) / ``any`` / ``all``."""
    if any(t is absorbing for t in truths):
        return absorbing
    return UNKNOWN if any(t is UNKNOWN for t in truths) else not absorbing


def _size_ok_for_text(v: object) -> bool:
    return _walk_value(v, MAX_SIZE)[0] <= MAX_SIZE and not _has_unknown(v)


_BIG_FORMAT = re.compile(r"\*|\d{5,}")


def _binop(op: ast.operator, a: object, b: object) -> object:
    if _opaque(a) or _opaque(b):
        return UNKNOWN
    seq = (str, bytes, list, tuple)
    ints = isinstance(a, int) and isinstance(b, int)
    if isinstance(op, ast.Mult):
        if isinstance(a, seq) and isinstance(b, int) and len(a) * max(b, 0) > MAX_SIZE:
            return UNKNOWN
        if isinstance(b, seq) and isinstance(a, int) and len(b) * max(a, 0) > MAX_SIZE:
            return UNKNOWN
        if ints and a.bit_length() + b.bit_length() > MAX_INT_BITS:  # type: ignore[union-attr]
            return UNKNOWN
    elif isinstance(op, ast.Pow):
        if ints and b > 0 and abs(a) > 1 and a.bit_length() * b > MAX_INT_BITS:  # type: ignore[operator,union-attr]
            return UNKNOWN
    elif isinstance(op, ast.LShift):
        if ints and b > 0 and a.bit_length() + b > MAX_INT_BITS:  # type: ignore[operator,union-attr]
            return UNKNOWN
    elif (
        isinstance(op, ast.Mod)
        and isinstance(a, (str, bytes))
        and (isinstance(a, bytes) or _BIG_FORMAT.search(a) or not _size_ok_for_text(b))
    ):
        return UNKNOWN
    seq_op = isinstance(op, (ast.Add, ast.Mult)) and (isinstance(a, seq) or isinstance(b, seq))
    if not seq_op and (_has_unknown(a) or _has_unknown(b)):
        return UNKNOWN
    fn = _BINOPS.get(type(op))
    if fn is None:
        return UNKNOWN
    try:
        return _bounded(fn(a, b))
    except Exception:
        return UNKNOWN


_BINOPS: dict[type, Callable[[Any, Any], object]] = {
    ast.Add: op_.add, ast.Sub: op_.sub, ast.Mult: op_.mul, ast.Div: op_.truediv,
    ast.FloorDiv: op_.floordiv, ast.Mod: op_.mod, ast.Pow: op_.pow, ast.LShift: op_.lshift,
    ast.RShift: op_.rshift, ast.BitOr: op_.or_, ast.BitXor: op_.xor, ast.BitAnd: op_.and_,
}  # fmt: skip
_CMPOPS: dict[type, Callable[[Any, Any], object]] = {
    ast.Eq: op_.eq, ast.NotEq: op_.ne, ast.Lt: op_.lt, ast.LtE: op_.le, ast.Gt: op_.gt,
    ast.GtE: op_.ge,
}  # fmt: skip
_UNARY: dict[type, Callable[[Any], object]] = {
    ast.USub: op_.neg, ast.UAdd: op_.pos, ast.Invert: op_.invert
}  # fmt: skip


def _member(elem: object, container: object) -> object:
    """Kleene ``elem in container``."""
    if _opaque(container):
        return UNKNOWN
    if isinstance(container, (list, tuple, set, frozenset, dict)) and len(container) == 0:
        return False
    if _has_unknown(elem):
        return UNKNOWN
    if isinstance(container, (list, tuple, set, frozenset, dict)) and _has_unknown(list(container)):
        saw_unknown = False
        for item in container:
            if _has_unknown(item):
                saw_unknown = True
                continue
            try:
                if bool(item == elem):
                    return True
            except Exception:
                saw_unknown = True
        return UNKNOWN if saw_unknown else False
    try:
        return bool(elem in container)  # type: ignore[operator]
    except Exception:
        return UNKNOWN


def _compare(op: ast.cmpop, a: object, b: object) -> object:
    if isinstance(op, (ast.In, ast.NotIn)):
        r = _member(a, b)
        return r if r is UNKNOWN or isinstance(op, ast.In) else not r
    if _opaque(a) or _opaque(b):
        return UNKNOWN
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    if _has_unknown(a) or _has_unknown(b):
        return UNKNOWN
    try:
        return _truth(_CMPOPS[type(op)](a, b))
    except Exception:
        return UNKNOWN


_TYPES: dict[str, type] = {
    "int": int, "str": str, "float": float, "bool": bool, "list": list,
    "dict": dict, "tuple": tuple, "set": set,
}  # fmt: skip


def _round(x: Any, n: Any = None) -> object:
    if n is not None and (not isinstance(n, int) or abs(n) > 100):
        raise ValueError("ndigits out of range")
    return round(x) if n is None else round(x, n)


_BUILTINS: dict[str, Callable[..., object]] = {
    "len": len, "int": int, "float": float, "str": str, "min": min, "max": max,
    "abs": abs, "sorted": sorted, "set": set, "list": list, "tuple": tuple, "round": _round,
}  # fmt: skip
_SHALLOW_BUILTINS = frozenset({"len", "list", "tuple"})  # fine with UNKNOWN inside containers
_STR_METHODS = frozenset({
    "lower", "upper", "strip", "startswith", "endswith", "split", "replace", "lstrip",
    "rstrip", "isdigit", "join", "count", "find",
})  # fmt: skip
_DICT_METHODS = frozenset({"get", "keys", "values", "items"})
_SEQ_METHODS = frozenset({"count", "index"})
_VALUE_METHODS = _STR_METHODS | _DICT_METHODS | _SEQ_METHODS


def _apply_builtin(name: str, args: list[object]) -> object:
    if any(_opaque(a) for a in args):
        return UNKNOWN
    if name == "bool":
        return _truth(args[0]) if len(args) == 1 else (False if not args else UNKNOWN)
    if name in ("any", "all"):
        if len(args) != 1 or not isinstance(args[0], (str, list, tuple, set, frozenset, dict)):
            return UNKNOWN
        return _kleene([_truth(x) for x in args[0]], absorbing=name == "any")
    if name not in _SHALLOW_BUILTINS and any(_has_unknown(a) for a in args):
        return UNKNOWN
    if name == "str" and not all(_size_ok_for_text(a) for a in args):
        return UNKNOWN
    try:
        return _bounded(_BUILTINS[name](*args))
    except Exception:
        return UNKNOWN


def _apply_method(recv: object, name: str, args: list[object], kwargs: dict[str, object]) -> object:
    if isinstance(recv, dict) and name in _DICT_METHODS:
        if name != "get":  # views become lists so that results stay JSON-ish
            return list(getattr(recv, name)()) if not args and not kwargs else UNKNOWN
        if not args or len(args) > 2 or kwargs or _has_unknown(args[0]):
            return UNKNOWN
        try:
            return recv[args[0]] if args[0] in recv else (args[1] if len(args) > 1 else None)
        except Exception:
            return UNKNOWN
    allowed = (isinstance(recv, str) and name in _STR_METHODS) or (
        isinstance(recv, (list, tuple)) and name in _SEQ_METHODS
    )
    if not allowed or _has_unknown(recv) or any(_has_unknown(a) for a in [*args, *kwargs.values()]):
        return UNKNOWN
    if (
        name == "replace"
        and len(args) >= 2
        and isinstance(args[0], str)
        and isinstance(args[1], str)
    ):
        s, old, new = recv, args[0], args[1]
        grow = (len(s) + 1) * len(new) if not old else s.count(old) * max(0, len(new) - len(old))  # type: ignore[attr-defined]
        if len(s) + grow > MAX_SIZE:  # type: ignore[arg-type]
            return UNKNOWN
    try:
        return _bounded(getattr(recv, name)(*args, **kwargs))
    except Exception:
        return UNKNOWN


# ------------------------------------------------------------------------ evaluator

Input = tuple[str, object, Provenance]


class _Evaluator:
    """Interprets one expression; records lookups per leaf."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.inputs: list[Input] = []
        self.names: set[str] = set()
        self.atoms: list[Atom] = []

    # --- lookups
    def record(self, name: str, value: object, prov: Provenance) -> None:
        if all(name != n for n, _, _ in self.inputs):
            self.inputs.append((name, value, prov))

    def attr(self, name: str) -> object:
        self.names.add(name)
        v = self.env.attrs.get(name)
        if v is None:
            self.record(name, UNKNOWN, Provenance("unknown", f"attribute {name} not known"))
            return UNKNOWN
        self.record(name, v.value, v.provenance)
        return v.value

    def fact(self, key: str) -> tuple[bool, object]:
        v = self.env.facts.get(key)
        if v is None:
            return False, UNKNOWN
        self.record(key, v.value, v.provenance)
        return True, v.value

    def missing(self, key: str, what: str = "fact") -> object:
        self.record(key, UNKNOWN, Provenance("unknown", f"{what} {key} not known"))
        return UNKNOWN

    # --- structure (and/or/not/ternary) with Kleene logic and atom collection
    def struct(
        self, node: ast.expr, depth: int, collect: bool
    ) -> tuple[object, object, frozenset[int]]:
        """Return (value, truth, indices of atoms whose UNKNOWN reached this node)."""
        if depth > MAX_DEPTH:
            raise UnsafeExpression(f"expression nested deeper than {MAX_DEPTH}")
        if isinstance(node, ast.BoolOp):
            parts = [self.struct(v, depth + 1, collect) for v in node.values]
            absorbing = isinstance(node.op, ast.Or)
            t = _kleene([p[1] for p in parts], absorbing)
            if t is UNKNOWN:
                blame = frozenset().union(*(p[2] for p in parts if p[1] is UNKNOWN))
                return UNKNOWN, UNKNOWN, blame
            # Python returns the first operand that decides, else the last one.
            at = next((i for i, p in enumerate(parts) if p[1] is absorbing), len(parts) - 1)
            exact = all(p[1] is not UNKNOWN for p in parts[:at])
            return (parts[at][0] if exact else t), t, frozenset()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            _, t, blame = self.struct(node.operand, depth + 1, collect)
            return (UNKNOWN, UNKNOWN, blame) if t is UNKNOWN else (not t, not t, frozenset())
        if isinstance(node, ast.IfExp):
            body = self.struct(node.body, depth + 1, collect)
            test = self.struct(node.test, depth + 1, collect)
            orelse = self.struct(node.orelse, depth + 1, collect)
            if test[1] is not UNKNOWN:
                return body if test[1] else orelse
            if body[1] is UNKNOWN or orelse[1] is UNKNOWN or body[1] != orelse[1]:
                blame = test[2] | body[2] | orelse[2]
                return UNKNOWN, UNKNOWN, blame
            same = not _has_unknown(body[0]) and type(body[0]) is type(orelse[0])
            try:
                same = same and bool(body[0] == orelse[0])
            except Exception:
                same = False
            return (body[0] if same else body[1]), body[1], frozenset()
        if not collect:
            v = self.interp(node, depth)
            return v, _truth(v), frozenset()
        outer, self.inputs = self.inputs, []
        try:
            v = self.interp(node, depth)
            t = _truth(v)
            self.atoms.append(Atom(ast.unparse(node), t, tuple(self.inputs)))
        finally:
            self.inputs = outer
        return v, t, frozenset({len(self.atoms) - 1}) if t is UNKNOWN else frozenset()

    # --- general nodes
    def interp(self, node: ast.expr, depth: int) -> object:
        if depth > MAX_DEPTH:
            raise UnsafeExpression(f"expression nested deeper than {MAX_DEPTH}")
        d = depth + 1
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.BoolOp, ast.IfExp)) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
        ):
            return self.struct(node, depth, collect=False)[0]
        if isinstance(node, ast.Name):
            if node.id in self.env.arg_objects:
                return ArgsView(self)
            found, v = self.fact(node.id)
            return v if found else self.missing(node.id, "name")
        if isinstance(node, ast.Attribute):
            return self.eval_attribute(node, d)
        if isinstance(node, ast.Call):
            return self.eval_call(node, d)
        if isinstance(node, ast.Compare):
            return self.eval_compare(node, d)
        if isinstance(node, ast.BinOp):
            return _binop(node.op, self.interp(node.left, d), self.interp(node.right, d))
        if isinstance(node, ast.UnaryOp):
            v = self.interp(node.operand, d)
            if _opaque(v) or _has_unknown(v):
                return UNKNOWN
            try:
                return _bounded(_UNARY[type(node.op)](v))
            except Exception:
                return UNKNOWN
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.interp(e, d) for e in node.elts]
            return _bounded(items if isinstance(node, ast.List) else tuple(items))
        if isinstance(node, ast.Set):
            items = [self.interp(e, d) for e in node.elts]
            return self._build(set, items)
        if isinstance(node, ast.Dict):
            keys = [self.interp(k, d) for k in node.keys if k is not None]
            vals = [self.interp(v, d) for v in node.values]
            if any(_has_unknown(k) for k in keys):
                return UNKNOWN
            return self._build(lambda kv: dict(zip(*kv, strict=True)), (keys, vals))
        if isinstance(node, ast.Subscript):
            return self.eval_subscript(node, d)
        if isinstance(node, ast.JoinedStr):
            return self.eval_fstring(node, d)
        if isinstance(node, ast.FormattedValue):  # only reachable via JoinedStr
            return self.eval_fstring(ast.JoinedStr([node]), d)
        raise UnsafeExpression(f"syntax not allowed in a condition: {type(node).__name__}")

    @staticmethod
    def _build(fn: Callable[[Any], object], arg: Any) -> object:
        if isinstance(arg, list) and _has_unknown(arg):
            return UNKNOWN
        try:
            return _bounded(fn(arg))
        except Exception:
            return UNKNOWN

    def eval_compare(self, node: ast.Compare, d: int) -> object:
        left = self.interp(node.left, d)
        truths: list[object] = []
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.interp(comp, d)
            truths.append(_compare(op, left, right))
            left = right
        return _kleene(truths, absorbing=False)

    def chain_lookup(self, node: ast.expr) -> tuple[bool, object]:
        """Look up ``self.a.b`` / ``self.m().x`` / ``envs.X`` by canonical key.

        Returns ``(True, value)`` when the chain was answered (from ``attrs``,
        from ``facts``, or recorded as missing because no prefix is known
        either), ``(False, None)`` when it must be evaluated step by step.
        """
        ch = _chain(node, self.env.arg_objects)
        if ch is None or not ch[1]:
            return False, None
        rooted, segs = ch
        if rooted and len(segs) == 1 and not segs[0].endswith(")"):
            return True, self.attr(segs[0])
        key = ".".join(segs)
        found, v = self.fact(key)
        if found:
            return True, v
        value_method = any(s.endswith(")") and s.split("(")[0] in _VALUE_METHODS for s in segs[1:])
        known_prefix = (rooted and segs[0] in self.env.attrs) or any(
            ".".join(segs[:i]) in self.env.facts for i in range(1, len(segs))
        )
        if value_method or known_prefix:
            return False, None
        return True, self.missing(key)

    def eval_attribute(self, node: ast.Attribute, d: int) -> object:
        handled, v = self.chain_lookup(node)
        if handled:
            return v
        base = self.interp(node.value, d)
        if isinstance(base, ArgsView):
            return self.attr(node.attr)
        if isinstance(base, dict):
            return base.get(node.attr, UNKNOWN)
        return UNKNOWN

    def eval_subscript(self, node: ast.Subscript, d: int) -> object:
        base = self.interp(node.value, d)
        sl = node.slice
        if isinstance(sl, ast.Slice):
            parts = [
                None if p is None else self.interp(p, d) for p in (sl.lower, sl.upper, sl.step)
            ]
            if any(_opaque(p) for p in parts):
                return UNKNOWN
            index: object = slice(*parts)
        else:
            index = self.interp(sl, d)
        if (
            _opaque(base)
            or _has_unknown(index)
            or not isinstance(base, (list, tuple, dict, str, bytes))
        ):
            return UNKNOWN
        try:
            return _bounded(base[index])  # type: ignore[index]
        except Exception:
            return UNKNOWN

    def eval_fstring(self, node: ast.JoinedStr, d: int) -> object:
        out: list[str] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
                continue
            if not isinstance(part, ast.FormattedValue):
                return UNKNOWN
            v = self.interp(part.value, d)
            spec = "" if part.format_spec is None else self.interp(part.format_spec, d)
            if not isinstance(spec, str) or _BIG_FORMAT.search(spec) or not _size_ok_for_text(v):
                return UNKNOWN
            try:
                conv = {115: str, 114: repr, 97: ascii}.get(part.conversion)
                out.append(format(conv(v) if conv else v, spec))
            except Exception:
                return UNKNOWN
        return _bounded("".join(out))

    def eval_args(self, node: ast.Call, d: int) -> tuple[list[object], dict[str, object]]:
        args = [self.interp(a, d) for a in node.args]
        kwargs = {k.arg: self.interp(k.value, d) for k in node.keywords if k.arg is not None}
        return args, kwargs

    def eval_call(self, node: ast.Call, d: int) -> object:
        func = node.func
        arg_objects = self.env.arg_objects
        if isinstance(func, ast.Name):
            name = func.id
            if _is_arg_root(node, arg_objects):
                return ArgsView(self)
            if name in ("getattr", "hasattr") and 2 <= len(node.args) <= 3 and not node.keywords:
                target = node.args[1]
                if (
                    _is_arg_root(node.args[0], arg_objects)
                    and isinstance(target, ast.Constant)
                    and isinstance(target.value, str)
                ):
                    attr = target.value
                    if attr in self.env.attrs:
                        return self.attr(attr) if name == "getattr" else True
                    self.names.add(attr)
                    if name == "getattr" and len(node.args) == 3:
                        v = self.interp(node.args[2], d)
                        self.record(
                            attr,
                            v,
                            Provenance("derived", f"attribute {attr} absent; getattr default"),
                        )
                        return v
                    return self.missing(attr, "attribute")
            if name == "isinstance" and len(node.args) == 2 and not node.keywords:
                return self.eval_isinstance(node, d)
            key = _norm_text(node, arg_objects)
            if name in self.env.functions:
                args, kwargs = self.eval_args(node, d)
                try:
                    result = self.env.functions[name](*args, **kwargs)
                except Exception:
                    return self.missing(key, "call")
                self.record(key, result, Provenance("derived", f"computed by {name}()"))
                return result
            found, v = self.fact(key)
            if found:
                return v
            if (name in _BUILTINS or name in ("bool", "any", "all")) and not node.keywords:
                args, _ = self.eval_args(node, d)
                return _apply_builtin(name, args)
            return self.missing(key, "function")
        if isinstance(func, ast.Attribute):
            handled, v = self.chain_lookup(node)
            if handled:
                return v
            recv = self.interp(func.value, d)
            if isinstance(recv, ArgsView):
                return self.missing(_norm_text(node, arg_objects), "method")
            if recv is UNKNOWN:
                return UNKNOWN
            args, kwargs = self.eval_args(node, d)
            return _apply_method(recv, func.attr, args, kwargs)
        return self.missing(ast.unparse(node), "call")

    def eval_isinstance(self, node: ast.Call, d: int) -> object:
        v = self.interp(node.args[0], d)
        spec = node.args[1]
        elts = spec.elts if isinstance(spec, ast.Tuple) else [spec]
        types: list[type] = []
        for e in elts:
            if isinstance(e, ast.Name) and e.id in _TYPES:
                types.append(_TYPES[e.id])
            elif ast.unparse(e) in ("None", "type(None)"):
                types.append(type(None))
            else:
                return UNKNOWN
        return UNKNOWN if _opaque(v) else isinstance(v, tuple(types))


# ------------------------------------------------------------------------ public API


def evaluate(expr: str | ast.AST, env: Env) -> Result:
    """Evaluate ``expr`` against ``env``; raises only :class:`UnsafeExpression`.

    Multi-line source as SGLang prints it is accepted (it is wrapped in
    parentheses when needed). Every leaf of the and/or/not/ternary structure is
    evaluated (it is pure, so short-circuiting only decides the result, not
    which atoms are shown) and reported as an :class:`Atom` in source order.
    """
    node = _to_node(expr, whitelist=True)
    ev = _Evaluator(env)
    try:
        value, t, blame = ev.struct(node, 0, collect=True)
    except RecursionError as exc:  # pragma: no cover - guarded by MAX_DEPTH
        raise UnsafeExpression("expression nested too deeply") from exc
    unknowns: list[str] = []
    for i in sorted(blame):
        for name, v, _ in ev.atoms[i].inputs:
            if v is UNKNOWN and name not in unknowns:
                unknowns.append(name)
    names = referenced_names(node, env.arg_objects) | ev.names
    return Result(value, t, tuple(ev.atoms), frozenset(names), tuple(unknowns))


def truth(expr: str | ast.AST, env: Env) -> object:
    """True / False / UNKNOWN: the truthiness of ``expr`` under ``env``."""
    return evaluate(expr, env).truth
