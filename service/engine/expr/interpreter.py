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

This module holds the public API and the interpreter; parsing, the whitelist and
canonical text live in :mod:`kb.conditions`, the value model and operator helpers in
:mod:`~service.engine.expr.values`, and lazy truths in :mod:`~service.engine.expr.decide`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kb.conditions import (
    DEFAULT_ARG_OBJECTS,
    arg_attr_read,
    attr_chain,
    check_depth,
    fact_key,
    is_arg_root,
    norm_text,
    normalize,
    referenced_names,
    to_node,
    unparse,
    validate,
)
from kb.conditions import MAX_DEPTH as MAX_DEPTH
from kb.conditions import MAX_NODES as MAX_NODES
from kb.conditions import MAX_TEXT as MAX_TEXT
from kb.conditions import VIEW_FUNCTIONS as VIEW_FUNCTIONS
from kb.errors import UnsafeExpression
from service.engine.expr.values import (
    BIG_FORMAT,
    BUILTINS,
    TYPES,
    UNARY_OPS,
    UNKNOWN,
    VALUE_METHODS,
    ArgsView,
    FactsView,
    apply_builtin,
    apply_method,
    binop,
    bounded,
    compare,
    has_unknown,
    kleene,
    opaque,
    size_ok_for_text,
    truth_value,
    undecided_ternary,
)
from service.engine.expr.values import MAX_INT_BITS as MAX_INT_BITS
from service.engine.expr.values import MAX_SIZE as MAX_SIZE

__all__ = [
    "UNKNOWN", "ArgsView", "Atom", "Env", "Evaluator", "Provenance", "Result", "Value", "evaluate",
    "fact_key", "normalize", "referenced_names", "truth", "validate",
]  # fmt: skip


ProvenanceKind = Literal["flag", "default", "write", "fact", "message", "derived", "unknown"]


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
        # kept as given (no copy: building an Env is on the hot path); values that are
        # not a Value are wrapped when they are looked up
        self.attrs: Mapping[str, Value] = attrs
        self.facts: Mapping[str, Value] = facts if facts is not None else {}
        self.functions: dict[str, Callable[..., object]] = dict(functions or {})
        self.arg_objects: frozenset[str] = frozenset(arg_objects)


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
    ``value`` is that decided bool (as an operand inside the expression such an
    ``and``/``or``/ternary has no known value). ``truth`` is True/False/UNKNOWN. ``unknowns``
    lists the UNKNOWN inputs of the atoms whose UNKNOWN actually propagated to
    the result (empty when the result is known).
    """

    value: object
    truth: object
    atoms: tuple[Atom, ...]
    names: frozenset[str]
    unknowns: tuple[str, ...]


# ------------------------------------------------------------------------ evaluator

Input = tuple[str, object, Provenance]


class Evaluator:
    """Interprets one expression; records lookups per leaf (subclassed by ``expr.decide``)."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.inputs: list[Input] = []
        self.names: set[str] = set()
        self.atoms: list[Atom] = []

    # --- lookups
    def record(self, name: str, value: object, prov: Provenance) -> None:
        if not isinstance(value, FactsView) and all(name != n for n, _, _ in self.inputs):
            self.inputs.append((name, value, prov))  # (a view's attributes are the inputs)

    def attr(self, name: str) -> object:
        self.names.add(name)
        raw = self.env.attrs.get(name)
        if raw is None:
            self.record(name, UNKNOWN, Provenance("unknown", f"attribute {name} not known"))
            return UNKNOWN
        v = _as_value(raw)
        self.record(name, v.value, v.provenance)
        return v.value

    def fact(self, key: str) -> tuple[bool, object]:
        raw = self.env.facts.get(key)
        if raw is None:
            return False, UNKNOWN
        v = _as_value(raw)
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
        check_depth(depth)
        if isinstance(node, ast.BoolOp):
            parts = [self.struct(v, depth + 1, collect) for v in node.values]
            absorbing = isinstance(node.op, ast.Or)
            t = kleene([p[1] for p in parts], absorbing)
            if t is UNKNOWN:
                blame = frozenset().union(*(p[2] for p in parts if p[1] is UNKNOWN))
                return UNKNOWN, UNKNOWN, blame
            # Python returns the first operand that decides, else the last one.
            at = next((i for i, p in enumerate(parts) if p[1] is absorbing), len(parts) - 1)
            exact = all(p[1] is not UNKNOWN for p in parts[:at])
            return (parts[at][0] if exact else UNKNOWN), t, frozenset()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            _, t, blame = self.struct(node.operand, depth + 1, collect)
            return (UNKNOWN, UNKNOWN, blame) if t is UNKNOWN else (not t, not t, frozenset())
        if isinstance(node, ast.IfExp):
            body = self.struct(node.body, depth + 1, collect)
            test = self.struct(node.test, depth + 1, collect)
            orelse = self.struct(node.orelse, depth + 1, collect)
            if test[1] is not UNKNOWN:
                return body if test[1] else orelse
            return undecided_ternary(test, body, orelse)
        if not collect:
            v = self.interp(node, depth)
            return v, truth_value(v), frozenset()
        outer, self.inputs = self.inputs, []
        try:
            v = self.interp(node, depth)
            t = truth_value(v)
            self.atoms.append(Atom(unparse(node), t, tuple(self.inputs)))
        finally:
            self.inputs = outer
        return v, t, frozenset({len(self.atoms) - 1}) if t is UNKNOWN else frozenset()

    # --- general nodes
    def interp(self, node: ast.expr, depth: int) -> object:
        check_depth(depth)
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
            return binop(node.op, self.interp(node.left, d), self.interp(node.right, d))
        if isinstance(node, ast.UnaryOp):
            v = self.interp(node.operand, d)
            if opaque(v) or has_unknown(v):
                return UNKNOWN
            try:
                return bounded(UNARY_OPS[type(node.op)](v))
            except Exception:
                return UNKNOWN
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.interp(e, d) for e in node.elts]
            return bounded(items if isinstance(node, ast.List) else tuple(items))
        if isinstance(node, ast.Set):
            items = [self.interp(e, d) for e in node.elts]
            return self._build(set, items)
        if isinstance(node, ast.Dict):
            keys = [self.interp(k, d) for k in node.keys if k is not None]
            vals = [self.interp(v, d) for v in node.values]
            if any(has_unknown(k) for k in keys):
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
        if isinstance(arg, list) and has_unknown(arg):
            return UNKNOWN
        try:
            return bounded(fn(arg))
        except Exception:
            return UNKNOWN

    def eval_compare(self, node: ast.Compare, d: int) -> object:
        left = self.interp(node.left, d)
        truths: list[object] = []
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.interp(comp, d)
            truths.append(compare(op, left, right))
            left = right
        return kleene(truths, absorbing=False)

    def chain_lookup(self, node: ast.expr) -> tuple[bool, object]:
        """Look up ``self.a.b`` / ``self.m().x`` / ``envs.X`` by canonical key.

        Returns ``(True, value)`` when the chain was answered (from ``attrs``,
        from ``facts``, or recorded as missing because no prefix is known
        either), ``(False, None)`` when it must be evaluated step by step.
        """
        ch = attr_chain(node, self.env.arg_objects)
        if ch is None or not ch[1]:
            return False, None
        rooted, segs = ch
        if rooted and len(segs) == 1 and not segs[0].endswith(")"):
            return True, self.attr(segs[0])
        key = ".".join(segs)
        found, v = self.fact(key)
        if found:
            return True, v
        value_method = any(s.endswith(")") and s.split("(")[0] in VALUE_METHODS for s in segs[1:])
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
        if isinstance(base, FactsView):  # each attribute is a fact of its own
            found, v = self.fact(key := f"{base.root}.{node.attr}")
            return v if found else self.missing(key)
        return base.get(node.attr, UNKNOWN) if isinstance(base, dict) else UNKNOWN

    def eval_subscript(self, node: ast.Subscript, d: int) -> object:
        base = self.interp(node.value, d)
        sl = node.slice
        if isinstance(sl, ast.Slice):
            parts = [
                None if p is None else self.interp(p, d) for p in (sl.lower, sl.upper, sl.step)
            ]
            if any(opaque(p) for p in parts):
                return UNKNOWN
            index: object = slice(*parts)
        else:
            index = self.interp(sl, d)
        if (
            opaque(base)
            or has_unknown(index)
            or not isinstance(base, (list, tuple, dict, str, bytes))
        ):
            return UNKNOWN
        try:
            # ``index`` is whatever the expression computed; a wrong type raises, caught below
            return bounded(base[index])  # type: ignore[call-overload, index]
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
            if not isinstance(spec, str) or BIG_FORMAT.search(spec) or not size_ok_for_text(v):
                return UNKNOWN
            try:
                conversions: dict[int, Callable[[object], str]] = {115: str, 114: repr, 97: ascii}
                conv = conversions.get(part.conversion)
                out.append(format(conv(v) if conv else v, spec))
            except Exception:
                return UNKNOWN
        return bounded("".join(out))

    def eval_args(self, node: ast.Call, d: int) -> tuple[list[object], dict[str, object]]:
        args = [self.interp(a, d) for a in node.args]
        kwargs = {k.arg: self.interp(k.value, d) for k in node.keywords if k.arg is not None}
        return args, kwargs

    def eval_call(self, node: ast.Call, d: int) -> object:
        func = node.func
        arg_objects = self.env.arg_objects
        if isinstance(func, ast.Name):
            name = func.id
            if is_arg_root(node, arg_objects):
                return ArgsView(self)
            attr = arg_attr_read(node, arg_objects)
            if attr is not None and len(node.args) <= 3 and not node.keywords:
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
            key = norm_text(node, arg_objects)
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
            if (name in BUILTINS or name in ("bool", "any", "all")) and not node.keywords:
                args, _ = self.eval_args(node, d)
                return apply_builtin(name, args)
            return self.missing(key, "function")
        if isinstance(func, ast.Attribute):
            handled, v = self.chain_lookup(node)
            if handled:
                return v
            recv = self.interp(func.value, d)
            if isinstance(recv, ArgsView):
                return self.missing(norm_text(node, arg_objects), "method")
            if recv is UNKNOWN:
                return UNKNOWN
            args, kwargs = self.eval_args(node, d)
            return apply_method(recv, func.attr, args, kwargs)
        return self.missing(unparse(node), "call")

    def eval_isinstance(self, node: ast.Call, d: int) -> object:
        v = self.interp(node.args[0], d)
        spec = node.args[1]
        elts = spec.elts if isinstance(spec, ast.Tuple) else [spec]
        types: list[type] = []
        for e in elts:
            if isinstance(e, ast.Name) and e.id in TYPES:
                types.append(TYPES[e.id])
            elif unparse(e) in ("None", "type(None)"):
                types.append(type(None))
            else:
                return UNKNOWN
        return UNKNOWN if opaque(v) else isinstance(v, tuple(types))


# ------------------------------------------------------------------------ public API


def evaluate(expr: str | ast.AST, env: Env) -> Result:
    """Evaluate ``expr`` against ``env``; raises only :class:`UnsafeExpression`.

    Multi-line source as SGLang prints it is accepted (it is wrapped in
    parentheses when needed). Every leaf of the and/or/not/ternary structure is
    evaluated (it is pure, so short-circuiting only decides the result, not
    which atoms are shown) and reported as an :class:`Atom` in source order.
    """
    node = to_node(expr, whitelist=True)
    ev = Evaluator(env)
    try:
        value, t, blame = ev.struct(node, 0, collect=True)
        value = t if value is UNKNOWN else value  # decided, but not which operand Python returns
    except RecursionError as exc:  # pragma: no cover - guarded by MAX_DEPTH
        raise UnsafeExpression("expression nested too deeply") from exc
    unknowns: list[str] = []
    for i in sorted(blame):
        for name, v, _ in ev.atoms[i].inputs:
            if v is UNKNOWN and name not in unknowns:
                unknowns.append(name)
    names = referenced_names(expr if isinstance(expr, str) else node, env.arg_objects) | ev.names
    return Result(value, t, tuple(ev.atoms), frozenset(names), tuple(unknowns))


def truth(expr: str | ast.AST, env: Env) -> object:
    """True / False / UNKNOWN: the truthiness of ``expr`` under ``env``."""
    return evaluate(expr, env).truth
