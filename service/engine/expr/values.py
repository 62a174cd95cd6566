"""Values of the safe expression evaluator: :data:`UNKNOWN`, :class:`ArgsView` and operators.

Everything here works on already evaluated values with three-valued (Kleene)
semantics and size bounds: truthiness, ``and``/``or`` folding, binary/unary
operators, comparisons and membership, plus the whitelists of builtins
(``len``, ``min``, ...) and value methods (``str.lower``, ``dict.get``, ...) a
condition may call. :mod:`service.engine.expr.interpreter` re-exports the public names.
"""

from __future__ import annotations

import ast
import operator as op_
import re
from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "BIG_FORMAT", "BUILTINS", "MAX_INT_BITS", "MAX_SIZE", "TYPES", "UNARY_OPS", "UNKNOWN",
    "VALUE_METHODS", "ArgsView", "apply_builtin", "apply_method", "binop", "bounded", "compare",
    "has_unknown", "kleene", "opaque", "size_ok_for_text", "truth_value", "undecided_ternary",
]  # fmt: skip

MAX_SIZE = 10_000  # elements/characters of any value the evaluator builds
MAX_INT_BITS = 10_000  # bits of any integer the evaluator builds


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


class _AttrReader(Protocol):
    """What an :class:`ArgsView` reads through (the evaluator, which records each read)."""

    def attr(self, name: str) -> object: ...


class ArgsView:
    """An argument object used as a value (``self``, ``resolved_view(server_args)``).

    Attribute reads return the raw value from ``attrs`` (``UNKNOWN`` if missing)
    and are recorded as inputs of the leaf being evaluated.
    """

    __slots__ = ("_ev",)

    def __init__(self, ev: _AttrReader) -> None:
        self._ev = ev

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ev.attr(name)

    def __repr__(self) -> str:
        return "<server args>"


class FactsView:
    """A fact that is an object of facts (0.5.23's ``get_platform()``): its attribute ``x``
    is the fact ``<root>.x``, read on its own. A memo keyed on the facts read then depends
    on the attributes used (``is_sm100``), not on the whole object (every probe of a GPU).
    """

    __slots__ = ("root",)

    def __init__(self, root: str) -> None:
        self.root = root

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FactsView) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"<facts {self.root}.*>"


# -------------------------------------------------------------------- value helpers


def opaque(v: object) -> bool:
    return v is UNKNOWN or isinstance(v, ArgsView)


def _walk_value(v: object, budget: int = MAX_SIZE * 4) -> tuple[int, bool]:
    """(flat size capped just above the budget, contains UNKNOWN/ArgsView anywhere)."""
    size, unknown, stack = 0, False, [v]
    while stack and size <= budget:
        x = stack.pop()
        if opaque(x):
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


def has_unknown(v: object) -> bool:
    if v is None or isinstance(v, (str, bytes, int, float)):  # the usual scalars: none
        return False
    return _walk_value(v)[1]


Struct = tuple[object, object, frozenset[int]]  # (value, truth, blamed atoms)


def undecided_ternary(test: Struct, body: Struct, orelse: Struct) -> Struct:
    """A ternary whose test is unknown: decided (truth, and value when both are equal)
    when its two branches agree; else unknown, blaming every part's atoms."""
    if body[1] is UNKNOWN or orelse[1] is UNKNOWN or body[1] != orelse[1]:
        return UNKNOWN, UNKNOWN, test[2] | body[2] | orelse[2]
    same = not has_unknown(body[0]) and type(body[0]) is type(orelse[0])
    try:
        same = same and bool(body[0] == orelse[0])
    except Exception:
        same = False
    return (body[0] if same else UNKNOWN), body[1], frozenset()


def bounded(v: object) -> object:
    """``v`` unless it is too large to keep (then UNKNOWN)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if v.bit_length() <= MAX_INT_BITS else UNKNOWN
    if isinstance(v, (str, bytes)):  # its length is its flat size
        return v if len(v) <= MAX_SIZE else UNKNOWN
    if isinstance(v, (list, tuple, set, frozenset, dict)):
        return v if _walk_value(v, MAX_SIZE)[0] <= MAX_SIZE else UNKNOWN
    return v


def truth_value(v: object) -> object:
    """Python truthiness of a known value; UNKNOWN for UNKNOWN or when ``bool()`` fails."""
    if v is UNKNOWN:
        return UNKNOWN
    if isinstance(v, ArgsView):
        return True
    try:
        return bool(v)
    except Exception:
        return UNKNOWN


def kleene(truths: list[object], absorbing: bool) -> object:
    """``and`` (absorbing False) / ``or`` (absorbing True) / ``any`` / ``all``."""
    if any(t is absorbing for t in truths):
        return absorbing
    return UNKNOWN if any(t is UNKNOWN for t in truths) else not absorbing


def size_ok_for_text(v: object) -> bool:
    return _walk_value(v, MAX_SIZE)[0] <= MAX_SIZE and not has_unknown(v)


BIG_FORMAT = re.compile(r"\*|\d{5,}")


def binop(op: ast.operator, a: object, b: object) -> object:
    if opaque(a) or opaque(b):
        return UNKNOWN
    seq = (str, bytes, list, tuple)
    if isinstance(op, ast.Mult):
        if isinstance(a, seq) and isinstance(b, int) and len(a) * max(b, 0) > MAX_SIZE:
            return UNKNOWN
        if isinstance(b, seq) and isinstance(a, int) and len(b) * max(a, 0) > MAX_SIZE:
            return UNKNOWN
        if (
            isinstance(a, int)
            and isinstance(b, int)
            and a.bit_length() + b.bit_length() > MAX_INT_BITS
        ):
            return UNKNOWN
    elif isinstance(op, ast.Pow):
        if (
            isinstance(a, int)
            and isinstance(b, int)
            and b > 0
            and abs(a) > 1
            and a.bit_length() * b > MAX_INT_BITS
        ):
            return UNKNOWN
    elif isinstance(op, ast.LShift):
        if (
            isinstance(a, int)
            and isinstance(b, int)
            and b > 0
            and a.bit_length() + b > MAX_INT_BITS
        ):
            return UNKNOWN
    elif (
        isinstance(op, ast.Mod)
        and isinstance(a, (str, bytes))
        and (isinstance(a, bytes) or BIG_FORMAT.search(a) or not size_ok_for_text(b))
    ):
        return UNKNOWN
    seq_op = isinstance(op, (ast.Add, ast.Mult)) and (isinstance(a, seq) or isinstance(b, seq))
    if not seq_op and (has_unknown(a) or has_unknown(b)):
        return UNKNOWN
    fn = _BINOPS.get(type(op))
    if fn is None:
        return UNKNOWN
    try:
        return bounded(fn(a, b))
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
UNARY_OPS: dict[type, Callable[[Any], object]] = {
    ast.USub: op_.neg, ast.UAdd: op_.pos, ast.Invert: op_.invert
}  # fmt: skip


def _member(elem: object, container: object) -> object:
    """Kleene ``elem in container``."""
    if opaque(container):
        return UNKNOWN
    if isinstance(container, (list, tuple, set, frozenset, dict)) and len(container) == 0:
        return False
    if has_unknown(elem):
        return UNKNOWN
    if isinstance(container, (list, tuple, set, frozenset, dict)) and has_unknown(list(container)):
        saw_unknown = False
        for item in container:
            if has_unknown(item):
                saw_unknown = True
                continue
            try:
                if bool(item == elem):
                    return True
            except Exception:
                saw_unknown = True
        return UNKNOWN if saw_unknown else False
    try:
        # any value: one without ``in`` raises, caught below
        return bool(elem in container)  # type: ignore[operator]
    except Exception:
        return UNKNOWN


def compare(op: ast.cmpop, a: object, b: object) -> object:
    if isinstance(op, (ast.In, ast.NotIn)):
        r = _member(a, b)
        return r if r is UNKNOWN or isinstance(op, ast.In) else not r
    if opaque(a) or opaque(b):
        return UNKNOWN
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    if has_unknown(a) or has_unknown(b):
        return UNKNOWN
    try:
        return truth_value(_CMPOPS[type(op)](a, b))
    except Exception:
        return UNKNOWN


TYPES: dict[str, type] = {
    "int": int, "str": str, "float": float, "bool": bool, "list": list,
    "dict": dict, "tuple": tuple, "set": set,
}  # fmt: skip


def _round(x: Any, n: Any = None) -> object:
    if n is not None and (not isinstance(n, int) or abs(n) > 100):
        raise ValueError("ndigits out of range")
    return round(x) if n is None else round(x, n)


BUILTINS: dict[str, Callable[..., object]] = {
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
VALUE_METHODS = _STR_METHODS | _DICT_METHODS | _SEQ_METHODS


def apply_builtin(name: str, args: list[object]) -> object:
    if any(opaque(a) for a in args):
        return UNKNOWN
    if name == "bool":
        return truth_value(args[0]) if len(args) == 1 else (False if not args else UNKNOWN)
    if name in ("any", "all"):
        if len(args) != 1 or not isinstance(args[0], (str, list, tuple, set, frozenset, dict)):
            return UNKNOWN
        return kleene([truth_value(x) for x in args[0]], absorbing=name == "any")
    if name not in _SHALLOW_BUILTINS and any(has_unknown(a) for a in args):
        return UNKNOWN
    if name == "str" and not all(size_ok_for_text(a) for a in args):
        return UNKNOWN
    try:
        return bounded(BUILTINS[name](*args))
    except Exception:
        return UNKNOWN


def apply_method(recv: object, name: str, args: list[object], kwargs: dict[str, object]) -> object:
    if isinstance(recv, dict) and name in _DICT_METHODS:
        if name != "get":  # views become lists so that results stay JSON-ish
            return list(getattr(recv, name)()) if not args and not kwargs else UNKNOWN
        if not args or len(args) > 2 or kwargs or has_unknown(args[0]):
            return UNKNOWN
        try:
            return recv[args[0]] if args[0] in recv else (args[1] if len(args) > 1 else None)
        except Exception:
            return UNKNOWN
    allowed = (isinstance(recv, str) and name in _STR_METHODS) or (
        isinstance(recv, (list, tuple)) and name in _SEQ_METHODS
    )
    if not allowed or has_unknown(recv) or any(has_unknown(a) for a in [*args, *kwargs.values()]):
        return UNKNOWN
    if (
        name == "replace"
        and isinstance(recv, str)  # only str has the ``replace`` method allowed above
        and len(args) >= 2
        and isinstance(args[0], str)
        and isinstance(args[1], str)
    ):
        s, old, new = recv, args[0], args[1]
        grow = (len(s) + 1) * len(new) if not old else s.count(old) * max(0, len(new) - len(old))
        if len(s) + grow > MAX_SIZE:
            return UNKNOWN
    try:
        return bounded(getattr(recv, name)(*args, **kwargs))
    except Exception:
        return UNKNOWN
