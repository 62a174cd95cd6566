"""Static values of literal-ish expressions in SGLang's source (nothing is executed).

:class:`StaticEvaluator` resolves strings, numbers, containers, constants (through
imports and star imports), class attributes, ``field(default=...)`` and zero-argument
helper functions to plain values, or :data:`UNKNOWN`; the string helpers read help
texts (f-strings kept as written) and :func:`jsonable` makes results JSON-friendly.
``ast`` is only used through ``ast.literal_eval`` on the text of literal nodes.
"""

from __future__ import annotations

import ast

from tree_sitter import Node

from ingest import ts
from ingest.static.modules import (
    ModuleLoader,
    SourceModule,
    from_import_names,
    name_assignment,
    name_assignments,
    resolve_from,
)

__all__ = [
    "UNKNOWN",
    "Scope",
    "StaticEvaluator",
    "forget_local_scopes",
    "is_stringish",
    "jsonable",
    "local_scope",
    "string_value",
    "text_of",
]


#: What a node evaluates to when its value cannot be told statically.
UNKNOWN = object()


def string_value(node: Node) -> object:
    """Value of a string / concatenated_string node, or UNKNOWN for f-strings."""
    if node.type == "concatenated_string":
        parts = [string_value(c) for c in node.named_children]
        if any(p is UNKNOWN for p in parts):
            return UNKNOWN
        return "".join(parts)  # type: ignore[arg-type]
    if any(c.type == "interpolation" for c in node.named_children):
        return UNKNOWN
    try:
        value = ast.literal_eval(ts.text(node))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN
    return value if isinstance(value, str) else UNKNOWN


def _raw_string(node: Node) -> str:
    """Text of a (possibly f-) string without prefix/quotes; escapes of f-strings kept."""
    value = string_value(node)
    if isinstance(value, str):
        return value
    if node.type == "concatenated_string":
        return "".join(_raw_string(c) for c in node.named_children)
    start = end = None
    for child in node.children:
        if child.type == "string_start":
            start = child.end_byte
        elif child.type == "string_end":
            end = child.start_byte
    src = node.text or b""
    if start is None or end is None:
        return ts.text(node)
    return src[start - node.start_byte : end - node.start_byte].decode("utf-8", "replace")


def text_of(node: Node | None) -> str | None:
    """Help-like text: literal strings joined; f-strings kept as written; ``+`` joined."""
    if node is None:
        return None
    t = node.type
    if t in ("string", "concatenated_string"):
        return _raw_string(node)
    if t == "parenthesized_expression" and node.named_children:
        return text_of(node.named_children[0])
    if t == "binary_operator" and ts.text(node.child_by_field_name("operator")) == "+":
        left = text_of(node.child_by_field_name("left"))
        right = text_of(node.child_by_field_name("right"))
        left = left if left is not None else "{" + ts.text(node.child_by_field_name("left")) + "}"
        right = (
            right if right is not None else "{" + ts.text(node.child_by_field_name("right")) + "}"
        )
        return left + right
    if t == "call":
        fn = node.child_by_field_name("function")
        if fn is not None and fn.type == "attribute":
            obj = fn.child_by_field_name("object")
            if obj is not None and is_stringish(obj):
                return text_of(obj)
    return None


def is_stringish(node: Node | None) -> bool:
    if node is None:
        return False
    if node.type in ("string", "concatenated_string"):
        return True
    if node.type == "parenthesized_expression" and node.named_children:
        return is_stringish(node.named_children[0])
    if node.type == "binary_operator" and ts.text(node.child_by_field_name("operator")) == "+":
        return is_stringish(node.child_by_field_name("left")) or is_stringish(
            node.child_by_field_name("right")
        )
    return False


def jsonable(value: object) -> object:
    """A JSON-friendly copy (tuples/sets -> lists), or UNKNOWN if any part is unknown."""
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable(v) for v in value]
        return UNKNOWN if any(v is UNKNOWN for v in items) else items
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            jv = jsonable(v)
            if jv is UNKNOWN:
                return UNKNOWN
            out[k if isinstance(k, (str, int, float, bool)) else str(k)] = jv
        return out
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return UNKNOWN


_CONTAINER_CALLS = {"list", "tuple", "set", "frozenset", "sorted"}
_FIELD_CALLS = {"field", "msgspec.field", "dataclasses.field"}
_FACTORIES: dict[str, object] = {"list": [], "dict": {}, "set": [], "tuple": [], "frozenset": []}


#: Local names of a function: a value node, or ``(module, name)`` for a local import.
Scope = dict[str, "Node | tuple[str, str]"]


class StaticEvaluator:
    """Resolves literal-ish expressions across the release's modules (never executing them).

    ``decl_defaults`` maps a ``ServerArgs``-style field to ``(known, default)`` so
    that ``ServerArgs.x`` / ``cls.x`` / ``_declared_default("x")`` read declared defaults.
    """

    def __init__(self, loader: ModuleLoader, decl_defaults: dict[str, tuple[bool, object]]) -> None:
        self.loader = loader
        self.decl_defaults = decl_defaults  # attr -> (known, value)
        self._active: set[tuple[str, int, int, str]] = set()
        self.class_names: set[str] = set()

    def eval(self, node: Node | None, mod: SourceModule, scope: Scope | None = None) -> object:
        if node is None:
            return UNKNOWN
        key = (mod.name, node.start_byte, node.end_byte, node.type)
        if key in self._active:  # cyclic definitions
            return UNKNOWN
        self._active.add(key)
        try:
            return self._eval(node, mod, scope or {})
        finally:
            self._active.discard(key)

    def _eval(self, node: Node, mod: SourceModule, scope: Scope) -> object:
        t = node.type
        if t in ("string", "concatenated_string"):
            return string_value(node)
        if t in ("integer", "float"):
            try:
                return ast.literal_eval(ts.text(node))
            except (ValueError, SyntaxError):
                return UNKNOWN
        if t == "true":
            return True
        if t == "false":
            return False
        if t == "none":
            return None
        if t in ("parenthesized_expression", "expression_statement") and node.named_children:
            return self.eval(node.named_children[0], mod, scope)
        if t == "unary_operator":
            val = self.eval(node.child_by_field_name("argument"), mod, scope)
            op = ts.text(node.child_by_field_name("operator"))
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                return -val if op == "-" else val if op == "+" else UNKNOWN
            return UNKNOWN
        if t in ("list", "tuple", "set"):
            out: list = []
            for child in node.named_children:
                if child.type == "comment":
                    continue
                if child.type == "list_splat":
                    inner = self.eval(
                        child.named_children[0] if child.named_children else None, mod, scope
                    )
                    if not isinstance(inner, (list, tuple, set, frozenset)):
                        return UNKNOWN
                    out.extend(inner)
                    continue
                val = self.eval(child, mod, scope)
                if val is UNKNOWN:
                    return UNKNOWN
                out.append(val)
            if t == "set":
                return _dedupe(out)
            return tuple(out) if t == "tuple" else out
        if t == "dictionary":
            d: dict = {}
            for child in node.named_children:
                if child.type == "comment":
                    continue
                if child.type != "pair":
                    return UNKNOWN
                k = self.eval(child.child_by_field_name("key"), mod, scope)
                v = self.eval(child.child_by_field_name("value"), mod, scope)
                if k is UNKNOWN:
                    return UNKNOWN  # unknown values are kept (keys stay usable)
                try:
                    d[k] = v
                except TypeError:
                    return UNKNOWN
            return d
        if t == "binary_operator":
            op = ts.text(node.child_by_field_name("operator"))
            left = self.eval(node.child_by_field_name("left"), mod, scope)
            right = self.eval(node.child_by_field_name("right"), mod, scope)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            if op == "+":
                if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                    return list(left) + list(right)
                if isinstance(left, str) and isinstance(right, str):
                    return left + right
                if _is_number(left) and _is_number(right):
                    return left + right  # type: ignore[operator]
            if op == "*" and _is_number(left) and _is_number(right):
                return left * right  # type: ignore[operator]
            if op == "|" and isinstance(left, list) and isinstance(right, list):
                return _dedupe(left + right)
            return UNKNOWN
        if t == "identifier":
            return self._name(ts.text(node), mod, scope)
        if t == "attribute":
            obj = node.child_by_field_name("object")
            attr = ts.text(node.child_by_field_name("attribute"))
            owner = ts.text(obj) if obj is not None and obj.type == "identifier" else ""
            if attr in self.decl_defaults and (
                owner in ("ServerArgs", "cls", "self") or owner in self.class_names
            ):
                known, value = self.decl_defaults[attr]
                return value if known else UNKNOWN
            if obj is not None and obj.type == "identifier":
                found = self._lookup(ts.text(obj), mod, scope, kind="class")
                if found is not None:
                    cmod, cls = found
                    rhs = _class_attr(cls, attr)
                    if rhs is not None:
                        return self.eval(rhs, cmod, None)
            return UNKNOWN
        if t == "subscript":
            base = self.eval(node.child_by_field_name("value"), mod, scope)
            subs = node.children_by_field_name("subscript")
            if len(subs) != 1 or base is UNKNOWN:
                return UNKNOWN
            idx = self.eval(subs[0], mod, scope)
            try:
                if (
                    isinstance(base, (list, tuple))
                    and isinstance(idx, int)
                    and not isinstance(idx, bool)
                ):
                    return base[idx]
                if isinstance(base, dict) and idx in base:
                    return base[idx]
            except (IndexError, TypeError):
                return UNKNOWN
            return UNKNOWN
        if t == "call":
            return self._call(node, mod, scope)
        return UNKNOWN

    def _name(self, name: str, mod: SourceModule, scope: Scope) -> object:
        found = self._lookup(name, mod, scope, kind="constant")
        if found is None:
            return UNKNOWN
        fmod, node = found
        return self.eval(node, fmod, scope if fmod is mod and scope.get(name) is node else None)

    def _lookup(
        self, name: str, mod: SourceModule, scope: Scope | None, *, kind: str, depth: int = 0
    ) -> tuple[SourceModule, Node] | None:
        """Find the defining node of ``name`` (a constant's value / a class / a function)."""
        if depth > 8:
            return None
        if scope and name in scope:
            entry = scope[name]
            if isinstance(entry, tuple):
                other = self.loader.load(entry[0])
                return (
                    self._lookup(entry[1], other, None, kind=kind, depth=depth + 1)
                    if other
                    else None
                )
            return (mod, entry) if kind == "constant" else None
        table = {"constant": mod.constants, "class": mod.classes, "function": mod.functions}[kind]
        if name in table:
            return mod, table[name]
        if name in mod.imports:
            src_mod, src_name = mod.imports[name]
            other = self.loader.load(src_mod)
            if other is not None and other is not mod:
                return self._lookup(src_name, other, None, kind=kind, depth=depth + 1)
            return None
        for star in mod.star_imports:
            other = self.loader.load(star)
            if other is not None and other is not mod:
                found = self._lookup(name, other, None, kind=kind, depth=depth + 1)
                if found is not None:
                    return found
        return None

    def _call(self, node: Node, mod: SourceModule, scope: Scope) -> object:
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or args is None:
            return UNKNOWN
        fname = ts.text(fn)
        pos = [a for a in args.named_children if a.type not in ("keyword_argument", "comment")]
        kws = {
            ts.text(a.child_by_field_name("name")): a.child_by_field_name("value")
            for a in args.named_children
            if a.type == "keyword_argument"
        }
        if fname in _CONTAINER_CALLS and len(pos) <= 1 and not kws:
            if not pos:
                return []
            inner = self.eval(pos[0], mod, scope)
            if isinstance(inner, dict):
                inner = list(inner)
            if isinstance(inner, (list, tuple)) and any(v is UNKNOWN for v in inner):
                return UNKNOWN
            if not isinstance(inner, (list, tuple, str)):
                return UNKNOWN
            if fname in ("set", "frozenset"):
                return _dedupe(list(inner))
            if fname == "sorted":
                try:
                    return sorted(inner)
                except TypeError:
                    return UNKNOWN
            return tuple(inner) if fname == "tuple" else list(inner)
        if fname == "dict" and not pos:
            out = {}
            for k, v in kws.items():
                val = self.eval(v, mod, scope)
                if val is UNKNOWN:
                    return UNKNOWN
                out[k] = val
            return out
        if fname in _FIELD_CALLS:
            if "default" in kws:
                return self.eval(kws["default"], mod, scope)
            factory = kws.get("default_factory")
            if factory is not None:
                if factory.type == "identifier" and ts.text(factory) in _FACTORIES:
                    value = _FACTORIES[ts.text(factory)]
                    return list(value) if isinstance(value, list) else dict(value)  # type: ignore[arg-type]
                if factory.type == "lambda":
                    return self.eval(factory.child_by_field_name("body"), mod, scope)
            return UNKNOWN
        # ``X.keys()`` on a dict constant
        if (
            fn.type == "attribute"
            and ts.text(fn.child_by_field_name("attribute")) == "keys"
            and not pos
        ):
            inner = self.eval(fn.child_by_field_name("object"), mod, scope)
            return list(inner) if isinstance(inner, dict) else UNKNOWN
        # ``_declared_default("name")`` (0.5.20+): the field's declared default
        if fname.endswith("_default") and len(pos) == 1 and pos[0].type == "string":
            attr = string_value(pos[0])
            if isinstance(attr, str) and attr in self.decl_defaults:
                known, value = self.decl_defaults[attr]
                return value if known else UNKNOWN
        # a zero-argument module function: its last top-level ``return``
        if fn.type == "identifier" and not pos and not kws:
            found = self._lookup(fname, mod, scope, kind="function")
            if found is not None:
                fmod, fdef = found
                ret, fscope = _function_return(fdef, fmod)
                if ret is not None:
                    return self.eval(ret, fmod, fscope)
        return UNKNOWN


def _class_attr(cls: Node, attr: str) -> Node | None:
    body = cls.child_by_field_name("body")
    found = None
    for stmt in body.named_children if body is not None else []:
        if stmt.type != "expression_statement":
            continue
        for name, right in name_assignments(stmt):
            if name == attr:
                found = right
    return found


def _function_return(fdef: Node, mod: SourceModule) -> tuple[Node | None, Scope]:
    """The last top-level ``return`` of a parameterless function, with its local imports/assignments."""
    params = fdef.child_by_field_name("parameters")
    if params is not None and any(
        p.type in ("identifier", "typed_parameter") for p in params.named_children
    ):
        return None, {}
    body = fdef.child_by_field_name("body")
    scope: Scope = {}
    ret: Node | None = None
    for stmt in body.named_children if body is not None else []:
        if stmt.type == "import_from_statement":
            src = resolve_from(stmt, mod.name, mod.rel.endswith("__init__.py"))
            if src is not None:
                scope.update(from_import_names(stmt, src))
        elif stmt.type == "expression_statement":
            scope.update(name_assignments(stmt))
        elif stmt.type == "return_statement" and stmt.named_children:
            ret = stmt.named_children[0]
    return ret, scope


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _dedupe(values: list) -> list:
    out: list = []
    for v in values:
        try:
            if v not in out:
                out.append(v)
        except TypeError:
            out.append(v)
    return out


# ---------------------------------------------------------------------------
# type annotations
# ---------------------------------------------------------------------------


_ASSIGN_CACHE: dict[tuple[int, int], list[tuple[int, str, Node]]] = {}


def local_scope(call: Node) -> Scope:
    """Simple ``name = expr`` assignments in the enclosing function before ``call``."""
    fn = call.parent
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    if fn is None:
        return {}
    key = (fn.id, fn.start_byte)
    assigns = _ASSIGN_CACHE.get(key)
    if assigns is None:
        assigns = []
        for node in ts.walk(fn):
            named = name_assignment(node)
            if named is not None:
                assigns.append((node.start_byte, *named))
        _ASSIGN_CACHE[key] = assigns
    return {name: right for start, name, right in assigns if start < call.start_byte}


def forget_local_scopes() -> None:
    """Drop the per-function assignment cache :func:`local_scope` fills (keyed by node ids)."""
    _ASSIGN_CACHE.clear()
