"""Static catalog of an SGLang release's server CLI flags (SGLang is never imported).

Three layouts are understood, all read with tree-sitter so that a file Python's
``ast`` cannot parse still yields whatever parses:

* ``argparse`` — ``parser.add_argument("--x", "--alias", type=..., default=ServerArgs.x, ...)``
  calls on any receiver in ``sglang/srt/server_args.py`` and ``sglang/srt/arg_groups/**``
  (up to 0.5.13, and the manual leftovers of later releases);
* ``annotated_field`` — ``name: A[T, "help"] = default`` / ``A[T, Arg(...)]`` fields of
  ``ServerArgs`` (0.5.14–0.5.19) or of the namespace classes in
  ``sglang/srt/arg_groups/fields/*.py`` (0.5.20+), turned into flags with the rules of
  ``arg_groups/arg_utils.py::add_cli_args_from_dataclass``.

``ast`` is only used through ``ast.literal_eval`` on the text of literal nodes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tree_sitter import Node

from sglang_triage.ingest import ts

__all__ = ["Catalog", "Declaration", "FlagSpec", "extract_catalog"]

Layout = Literal["argparse", "annotated_field"]


@dataclass
class FlagSpec:
    attr: str
    flags: list[str]
    type: str | None
    action: str | None
    nargs: str | None
    default: object
    default_known: bool
    default_src: str | None
    choices: list | None
    choices_src: str | None
    help: str | None
    required: bool
    deprecated: bool
    path: str
    line: int
    layout: Layout
    # --- additions beyond the brief (all optional) ---
    const: object = None
    # argparse dest when it differs from ``attr`` (renamed in ServerArgs.from_cli_args)
    dest: str | None = None
    # remaining add_argument / action kwargs, e.g. new_flag, error_message, const_value
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def takes_value(self) -> bool:
        """Whether a spelling of this flag consumes value tokens."""
        return _nargs_kind(self) != "0"


@dataclass
class Declaration:
    attr: str
    annotation: str
    default: object
    default_known: bool
    default_src: str | None
    help: str | None
    path: str
    line: int
    cls: str


@dataclass
class Catalog:
    flags: list[FlagSpec]
    declarations: list[Declaration]

    def by_flag(self) -> dict[str, FlagSpec]:
        out: dict[str, FlagSpec] = {}
        for spec in self.flags:
            for spelling in spec.flags:
                out.setdefault(spelling, spec)
        return out

    def by_attr(self) -> dict[str, FlagSpec]:
        """attr -> its main spec (a non-deprecated one when there is a choice)."""
        out: dict[str, FlagSpec] = {}
        for spec in self.flags:
            cur = out.get(spec.attr)
            if cur is None or (cur.deprecated and not spec.deprecated):
                out[spec.attr] = spec
        return out

    def specs_for(self, attr: str) -> list[FlagSpec]:
        """Every spec writing ``attr`` (e.g. a live flag plus a deprecated spelling)."""
        return [s for s in self.flags if s.attr == attr]

    def declaration(self, attr: str) -> Declaration | None:
        for decl in self.declarations:
            if decl.attr == attr:
                return decl
        return None


# ---------------------------------------------------------------------------
# module loading
# ---------------------------------------------------------------------------

_UNKNOWN = object()
_SPLIT_WS = re.compile(r"\s+")


@dataclass
class _Module:
    name: str  # dotted, e.g. "sglang.srt.server_args"
    rel: str  # "sglang/srt/server_args.py"
    root: Node
    constants: dict[str, Node]  # top-level NAME = expr (last wins)
    imports: dict[str, tuple[str, str]]  # local name -> (module, name)
    classes: dict[str, Node]
    functions: dict[str, Node]
    star_imports: list[str]


class _Loader:
    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self.modules: dict[str, _Module | None] = {}

    def module_path(self, dotted: str) -> Path | None:
        parts = dotted.split(".")
        if not parts or parts[0] != self.package_dir.name:
            return None
        base = self.package_dir.joinpath(*parts[1:])
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand
        return None

    def load(self, dotted: str) -> _Module | None:
        if dotted not in self.modules:
            path = self.module_path(dotted)
            self.modules[dotted] = self._parse(dotted, path) if path else None
        return self.modules[dotted]

    def load_path(self, path: Path) -> _Module:
        rel = path.relative_to(self.package_dir.parent)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        dotted = ".".join(parts)
        mod = self.load(dotted)
        assert mod is not None
        return mod

    def _parse(self, dotted: str, path: Path) -> _Module:
        root = ts.parse(path.read_bytes()).root_node
        rel = path.relative_to(self.package_dir.parent).as_posix()
        constants: dict[str, Node] = {}
        imports: dict[str, tuple[str, str]] = {}
        classes: dict[str, Node] = {}
        functions: dict[str, Node] = {}
        stars: list[str] = []
        is_pkg = path.name == "__init__.py"
        for stmt in _top_statements(root):
            if stmt.type == "expression_statement":
                for child in stmt.named_children:
                    if child.type == "assignment":
                        left = child.child_by_field_name("left")
                        right = child.child_by_field_name("right")
                        if left is not None and left.type == "identifier" and right is not None:
                            constants[ts.text(left)] = right
            elif stmt.type == "import_from_statement":
                src_mod = _resolve_from(stmt, dotted, is_pkg)
                if src_mod is None:
                    continue
                if any(c.type == "wildcard_import" for c in stmt.named_children):
                    stars.append(src_mod)
                imports.update(_from_import_names(stmt, src_mod))
            elif stmt.type in ("class_definition", "decorated_definition", "function_definition"):
                d = (
                    stmt.child_by_field_name("definition")
                    if stmt.type == "decorated_definition"
                    else stmt
                )
                if d is not None and d.type == "class_definition":
                    classes[ts.text(d.child_by_field_name("name"))] = d
                elif d is not None and d.type == "function_definition":
                    functions[ts.text(d.child_by_field_name("name"))] = d
        return _Module(dotted, rel, root, constants, imports, classes, functions, stars)


def _top_statements(root: Node) -> list[Node]:
    """Module-level statements, looking through ``if``/``try`` blocks and ERROR nodes."""
    out: list[Node] = []
    stack = list(reversed(root.named_children))
    while stack:
        node = stack.pop()
        if node.type in (
            "if_statement",
            "try_statement",
            "ERROR",
            "block",
            "else_clause",
            "elif_clause",
            "except_clause",
            "finally_clause",
        ):
            stack.extend(reversed(node.named_children))
        else:
            out.append(node)
    return out


def _from_import_names(stmt: Node, src_mod: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for child in stmt.children_by_field_name("name"):
        if child.type == "aliased_import":
            name = ts.text(child.child_by_field_name("name"))
            alias = ts.text(child.child_by_field_name("alias"))
        else:
            name = alias = ts.text(child)
        out[alias] = (src_mod, name)
    return out


def _resolve_from(stmt: Node, current: str, is_pkg: bool) -> str | None:
    mod_node = stmt.child_by_field_name("module_name")
    if mod_node is None:
        return None
    name = ts.text(mod_node)
    if mod_node.type == "relative_import":
        dots = len(name) - len(name.lstrip("."))
        rest = name[dots:]
        parts = current.split(".")
        if not is_pkg:
            parts = parts[:-1]
        if dots > 1:
            parts = parts[: len(parts) - (dots - 1)]
        return ".".join(parts + ([rest] if rest else []))
    return name


# ---------------------------------------------------------------------------
# static evaluation of literal-ish expressions
# ---------------------------------------------------------------------------


def _string_value(node: Node) -> object:
    """Value of a string / concatenated_string node, or _UNKNOWN for f-strings."""
    if node.type == "concatenated_string":
        parts = [_string_value(c) for c in node.named_children]
        if any(p is _UNKNOWN for p in parts):
            return _UNKNOWN
        return "".join(parts)  # type: ignore[arg-type]
    if any(c.type == "interpolation" for c in node.named_children):
        return _UNKNOWN
    try:
        value = ast.literal_eval(ts.text(node))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN
    return value if isinstance(value, str) else _UNKNOWN


def _raw_string(node: Node) -> str:
    """Text of a (possibly f-) string without prefix/quotes; escapes of f-strings kept."""
    value = _string_value(node)
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


def _text_of(node: Node | None) -> str | None:
    """Help-like text: literal strings joined; f-strings kept as written; ``+`` joined."""
    if node is None:
        return None
    t = node.type
    if t in ("string", "concatenated_string"):
        return _raw_string(node)
    if t == "parenthesized_expression" and node.named_children:
        return _text_of(node.named_children[0])
    if t == "binary_operator" and ts.text(node.child_by_field_name("operator")) == "+":
        left = _text_of(node.child_by_field_name("left"))
        right = _text_of(node.child_by_field_name("right"))
        left = left if left is not None else "{" + ts.text(node.child_by_field_name("left")) + "}"
        right = (
            right if right is not None else "{" + ts.text(node.child_by_field_name("right")) + "}"
        )
        return left + right
    if t == "call":
        fn = node.child_by_field_name("function")
        if fn is not None and fn.type == "attribute":
            obj = fn.child_by_field_name("object")
            if obj is not None and _is_stringish(obj):
                return _text_of(obj)
    return None


def _is_stringish(node: Node | None) -> bool:
    if node is None:
        return False
    if node.type in ("string", "concatenated_string"):
        return True
    if node.type == "parenthesized_expression" and node.named_children:
        return _is_stringish(node.named_children[0])
    if node.type == "binary_operator" and ts.text(node.child_by_field_name("operator")) == "+":
        return _is_stringish(node.child_by_field_name("left")) or _is_stringish(
            node.child_by_field_name("right")
        )
    return False


def _jsonable(value: object) -> object:
    """A JSON-friendly copy (tuples/sets -> lists), or _UNKNOWN if any part is unknown."""
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return _UNKNOWN if any(v is _UNKNOWN for v in items) else items
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            jv = _jsonable(v)
            if jv is _UNKNOWN:
                return _UNKNOWN
            out[k if isinstance(k, (str, int, float, bool)) else str(k)] = jv
        return out
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return _UNKNOWN


_CONTAINER_CALLS = {"list", "tuple", "set", "frozenset", "sorted"}
_FIELD_CALLS = {"field", "msgspec.field", "dataclasses.field"}
_FACTORIES: dict[str, object] = {"list": [], "dict": {}, "set": [], "tuple": [], "frozenset": []}


class _Evaluator:
    def __init__(self, loader: _Loader, decl_defaults: dict[str, tuple[bool, object]]) -> None:
        self.loader = loader
        self.decl_defaults = decl_defaults  # attr -> (known, value)
        self._active: set[tuple[str, int, int, str]] = set()
        self.class_names: set[str] = set()

    def eval(self, node: Node | None, mod: _Module, scope: _Scope | None = None) -> object:
        if node is None:
            return _UNKNOWN
        key = (mod.name, node.start_byte, node.end_byte, node.type)
        if key in self._active:  # cyclic definitions
            return _UNKNOWN
        self._active.add(key)
        try:
            return self._eval(node, mod, scope or {})
        finally:
            self._active.discard(key)

    def _eval(self, node: Node, mod: _Module, scope: _Scope) -> object:  # noqa: C901
        t = node.type
        if t in ("string", "concatenated_string"):
            return _string_value(node)
        if t in ("integer", "float"):
            try:
                return ast.literal_eval(ts.text(node))
            except (ValueError, SyntaxError):
                return _UNKNOWN
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
                return -val if op == "-" else val if op == "+" else _UNKNOWN
            return _UNKNOWN
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
                        return _UNKNOWN
                    out.extend(inner)
                    continue
                val = self.eval(child, mod, scope)
                if val is _UNKNOWN:
                    return _UNKNOWN
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
                    return _UNKNOWN
                k = self.eval(child.child_by_field_name("key"), mod, scope)
                v = self.eval(child.child_by_field_name("value"), mod, scope)
                if k is _UNKNOWN:
                    return _UNKNOWN  # unknown values are kept (keys stay usable)
                try:
                    d[k] = v
                except TypeError:
                    return _UNKNOWN
            return d
        if t == "binary_operator":
            op = ts.text(node.child_by_field_name("operator"))
            left = self.eval(node.child_by_field_name("left"), mod, scope)
            right = self.eval(node.child_by_field_name("right"), mod, scope)
            if left is _UNKNOWN or right is _UNKNOWN:
                return _UNKNOWN
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
            return _UNKNOWN
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
                return value if known else _UNKNOWN
            if obj is not None and obj.type == "identifier":
                found = self._lookup(ts.text(obj), mod, scope, kind="class")
                if found is not None:
                    cmod, cls = found
                    rhs = _class_attr(cls, attr)
                    if rhs is not None:
                        return self.eval(rhs, cmod, None)
            return _UNKNOWN
        if t == "subscript":
            base = self.eval(node.child_by_field_name("value"), mod, scope)
            subs = node.children_by_field_name("subscript")
            if len(subs) != 1 or base is _UNKNOWN:
                return _UNKNOWN
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
                return _UNKNOWN
            return _UNKNOWN
        if t == "call":
            return self._call(node, mod, scope)
        return _UNKNOWN

    def _name(self, name: str, mod: _Module, scope: _Scope) -> object:
        found = self._lookup(name, mod, scope, kind="constant")
        if found is None:
            return _UNKNOWN
        fmod, node = found
        return self.eval(node, fmod, scope if fmod is mod and scope.get(name) is node else None)

    def _lookup(
        self, name: str, mod: _Module, scope: _Scope | None, *, kind: str, depth: int = 0
    ) -> tuple[_Module, Node] | None:
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

    def _call(self, node: Node, mod: _Module, scope: _Scope) -> object:
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or args is None:
            return _UNKNOWN
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
            if isinstance(inner, (list, tuple)) and any(v is _UNKNOWN for v in inner):
                return _UNKNOWN
            if not isinstance(inner, (list, tuple, str)):
                return _UNKNOWN
            if fname in ("set", "frozenset"):
                return _dedupe(list(inner))
            if fname == "sorted":
                try:
                    return sorted(inner)
                except TypeError:
                    return _UNKNOWN
            return tuple(inner) if fname == "tuple" else list(inner)
        if fname == "dict" and not pos:
            out = {}
            for k, v in kws.items():
                val = self.eval(v, mod, scope)
                if val is _UNKNOWN:
                    return _UNKNOWN
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
            return _UNKNOWN
        # ``X.keys()`` on a dict constant
        if (
            fn.type == "attribute"
            and ts.text(fn.child_by_field_name("attribute")) == "keys"
            and not pos
        ):
            inner = self.eval(fn.child_by_field_name("object"), mod, scope)
            return list(inner) if isinstance(inner, dict) else _UNKNOWN
        # ``_declared_default("name")`` (0.5.20+): the field's declared default
        if fname.endswith("_default") and len(pos) == 1 and pos[0].type == "string":
            attr = _string_value(pos[0])
            if isinstance(attr, str) and attr in self.decl_defaults:
                known, value = self.decl_defaults[attr]
                return value if known else _UNKNOWN
        # a zero-argument module function: its last top-level ``return``
        if fn.type == "identifier" and not pos and not kws:
            found = self._lookup(fname, mod, scope, kind="function")
            if found is not None:
                fmod, fdef = found
                ret, fscope = _function_return(fdef, fmod)
                if ret is not None:
                    return self.eval(ret, fmod, fscope)
        return _UNKNOWN


_Scope = dict[str, "Node | tuple[str, str]"]


def _class_attr(cls: Node, attr: str) -> Node | None:
    body = cls.child_by_field_name("body")
    found = None
    for stmt in body.named_children if body is not None else []:
        if stmt.type != "expression_statement":
            continue
        for child in stmt.named_children:
            if child.type == "assignment":
                left = child.child_by_field_name("left")
                if left is not None and left.type == "identifier" and ts.text(left) == attr:
                    found = child.child_by_field_name("right") or found
    return found


def _function_return(fdef: Node, mod: _Module) -> tuple[Node | None, _Scope]:
    """The last top-level ``return`` of a parameterless function, with its local imports/assignments."""
    params = fdef.child_by_field_name("parameters")
    if params is not None and any(
        p.type in ("identifier", "typed_parameter") for p in params.named_children
    ):
        return None, {}
    body = fdef.child_by_field_name("body")
    scope: _Scope = {}
    ret: Node | None = None
    for stmt in body.named_children if body is not None else []:
        if stmt.type == "import_from_statement":
            src = _resolve_from(stmt, mod.name, mod.rel.endswith("__init__.py"))
            if src is not None:
                scope.update(_from_import_names(stmt, src))
        elif stmt.type == "expression_statement":
            for child in stmt.named_children:
                left = child.child_by_field_name("left") if child.type == "assignment" else None
                if (
                    left is not None
                    and left.type == "identifier"
                    and child.child_by_field_name("right")
                ):
                    scope[ts.text(left)] = child.child_by_field_name("right")  # type: ignore[assignment]
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


@dataclass
class _T:
    head: str  # "Optional", "Union", "List", "Literal", "Annotated", "int", "None", "<str>", "<call>", "<expr>"
    args: list[_T]
    node: Node


def _tparse(node: Node) -> _T:
    t = node.type
    if t in ("type", "parenthesized_expression") and node.named_children:
        return _tparse(node.named_children[0])
    if t == "generic_type":
        kids = node.named_children
        head = ts.text(kids[0]) if kids else ""
        args: list[_T] = []
        for kid in kids[1:]:
            if kid.type == "type_parameter":
                args.extend(_tparse(c) for c in kid.named_children if c.type != "comment")
        return _T(_norm_head(head), args, node)
    if t == "subscript":
        head = ts.text(node.child_by_field_name("value"))
        subs = [s for s in node.children_by_field_name("subscript") if s.type != "comment"]
        if len(subs) == 1 and subs[0].type == "tuple":
            subs = [c for c in subs[0].named_children if c.type != "comment"]
        return _T(_norm_head(head), [_tparse(s) for s in subs], node)
    if t == "binary_operator" and ts.text(node.child_by_field_name("operator")) == "|":
        parts = [
            _tparse(node.child_by_field_name("left")),
            _tparse(node.child_by_field_name("right")),
        ]
        return _T("Union", parts, node)
    if t in ("identifier", "attribute"):
        return _T(_norm_head(ts.text(node)), [], node)
    if t == "none":
        return _T("None", [], node)
    if _is_stringish(node):
        return _T("<str>", [], node)
    if t == "call":
        return _T("<call>", [], node)
    return _T("<expr>", [], node)


def _norm_head(head: str) -> str:
    last = head.rsplit(".", 1)[-1]
    if last in ("A", "Annotated"):
        return "Annotated"
    return {"list": "List", "List": "List", "Optional": "Optional", "Union": "Union"}.get(
        last, last
    )


def _flatten_union(tp: _T) -> list[_T]:
    if tp.head == "Union":
        out: list[_T] = []
        for a in tp.args:
            out.extend(_flatten_union(a))
        return out
    if tp.head == "Optional" and tp.args:
        return _flatten_union(tp.args[0]) + [_T("None", [], tp.node)]
    return [tp]


def _unwrap_optional(tp: _T) -> _T:
    if tp.head in ("Union", "Optional"):
        non_none = [a for a in _flatten_union(tp) if a.head != "None"]
        if len(non_none) == 1:
            return non_none[0]
    return tp


def _infer_type(name: str) -> str:
    return name if name in ("str", "int", "float") else "str"


# ---------------------------------------------------------------------------
# extraction
# ---------------------------------------------------------------------------

_ARG_FIELDS = [
    "help",
    "choices",
    "aliases",
    "cli_name",
    "type_parser",
    "nargs",
    "required",
    "action",
    "action_kwargs",
    "const",
    "no_cli",
]
_BUILTIN_ACTIONS = {
    "store",
    "store_const",
    "store_true",
    "store_false",
    "append",
    "append_const",
    "count",
    "help",
    "version",
    "extend",
}
_DEPRECATED_HELP = re.compile(
    r"^\W*deprecated\b"  # "Deprecated. Use ...", "[Deprecated] ...", "(Deprecated: ...)"
    r"|^\W*note:\s*(this|the)?\s*(flag|argument|option|--[\w-]+)\s+is\s+deprecated"
    r"|\b(this|the) (flag|argument|option) is deprecated",
    re.IGNORECASE,
)


@dataclass
class _FieldInfo:
    mod: _Module
    cls: str
    name: str
    node: Node  # the assignment
    type_node: Node
    right: Node | None


def _class_fields(mod: _Module, cls_node: Node) -> list[_FieldInfo]:
    body = cls_node.child_by_field_name("body")
    out: list[_FieldInfo] = []
    if body is None:
        return out
    cls_name = ts.text(cls_node.child_by_field_name("name"))
    stack = list(reversed(body.named_children))
    while stack:
        stmt = stack.pop()
        if stmt.type == "ERROR":
            stack.extend(reversed(stmt.named_children))
            continue
        if stmt.type != "expression_statement":
            continue
        for child in stmt.named_children:
            if child.type != "assignment":
                continue
            left = child.child_by_field_name("left")
            tnode = child.child_by_field_name("type")
            if left is None or left.type != "identifier" or tnode is None:
                continue
            if re.match(r"^\s*(typing\.)?ClassVar\b", ts.text(tnode)):
                continue
            out.append(
                _FieldInfo(
                    mod, cls_name, ts.text(left), child, tnode, child.child_by_field_name("right")
                )
            )
    return out


def _kwargs(args: Node) -> tuple[list[Node], dict[str, Node], bool]:
    pos: list[Node] = []
    kws: dict[str, Node] = {}
    splat = False
    for a in args.named_children:
        if a.type == "comment":
            continue
        if a.type == "keyword_argument":
            kws[ts.text(a.child_by_field_name("name"))] = a.child_by_field_name("value")
        elif a.type in ("list_splat", "dictionary_splat"):
            splat = True
        else:
            pos.append(a)
    return pos, kws, splat


def _action_name(node: Node | None) -> str | None:
    if node is None:
        return None
    if node.type in ("string", "concatenated_string"):
        v = _string_value(node)
        return v if isinstance(v, str) else ts.text(node)
    return ts.text(node).rsplit(".", 1)[-1]


def _callable_name(node: Node | None) -> str | None:
    if node is None:
        return None
    if node.type == "none":
        return None
    if node.type == "lambda":
        return "lambda"
    return ts.text(node)


class _Extractor:
    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self.loader = _Loader(package_dir)
        srt = package_dir / "srt"
        self.files: list[Path] = []
        if (srt / "server_args.py").is_file():
            self.files.append(srt / "server_args.py")
        if (srt / "arg_groups").is_dir():
            self.files.extend(sorted((srt / "arg_groups").rglob("*.py")))
        self.mods = [self.loader.load_path(p) for p in self.files]
        self.action_classes: dict[str, dict[str, tuple[bool, object]]] = {}
        self.evaluator = _Evaluator(self.loader, {})

    # -- declarations -------------------------------------------------------
    def _field_classes(self) -> list[tuple[_Module, Node]]:
        selected: list[tuple[_Module, Node]] = []
        seen: set[tuple[str, str]] = set()

        def add(mod: _Module, name: str) -> None:
            if (mod.name, name) in seen or name not in mod.classes:
                return
            seen.add((mod.name, name))
            cls = mod.classes[name]
            # bases declared in scanned modules first (MRO-ish order)
            supers = cls.child_by_field_name("superclasses")
            if supers is not None:
                for base in supers.named_children:
                    if base.type == "identifier":
                        bname = ts.text(base)
                        for m in self.mods:
                            if bname in m.classes:
                                add(m, bname)
                                break
            selected.append((mod, cls))

        for mod in self.mods:
            in_fields = "/arg_groups/fields/" in mod.rel
            for name, cls in mod.classes.items():
                is_server_args = name == "ServerArgs" and mod.rel.endswith("srt/server_args.py")
                if is_server_args or in_fields or _has_ns_path(cls):
                    add(mod, name)
        return selected

    def run(self) -> Catalog:
        classes = self._field_classes()
        self.evaluator.class_names = {ts.text(c.child_by_field_name("name")) for _, c in classes}
        fields: list[_FieldInfo] = []
        for mod, cls in classes:
            fields.extend(_class_fields(mod, cls))

        decl_defaults: dict[str, tuple[bool, object]] = {}
        declarations: list[Declaration] = []
        metas: list[tuple[_FieldInfo, _T, Node | None, object, bool]] = []
        for f in fields:
            value = self.evaluator.eval(f.right, f.mod) if f.right is not None else _UNKNOWN
            value = _jsonable(value) if value is not _UNKNOWN else _UNKNOWN
            known = value is not _UNKNOWN
            if f.name not in decl_defaults or not decl_defaults[f.name][0]:
                decl_defaults[f.name] = (known, value if known else None)
            tp = _tparse(f.type_node)
            meta = None
            if tp.head == "Annotated":
                for a in tp.args[1:]:
                    if a.head == "<str>" or (
                        a.head == "<call>"
                        and ts.text(a.node.child_by_field_name("function")).rsplit(".", 1)[-1]
                        == "Arg"
                    ):
                        meta = a.node
                        break
            help_text = None
            if meta is not None:
                help_text = (
                    _text_of(meta)
                    if _is_stringish(meta)
                    else _text_of(self._arg_kwargs(meta).get("help"))
                )
            declarations.append(
                Declaration(
                    attr=f.name,
                    annotation=ts.text(f.type_node),
                    default=value if known else None,
                    default_known=known,
                    default_src=ts.text(f.right) if f.right is not None else None,
                    help=help_text,
                    path=f.mod.rel,
                    line=ts.start_line(f.node),
                    cls=f.cls,
                )
            )
            if f.right is None:
                # a field without default: argparse gets no default (required rule)
                decl_defaults.setdefault(f.name, (False, None))
            metas.append((f, tp, meta, value, known))
        self.evaluator.decl_defaults = decl_defaults
        self._collect_action_classes()

        specs: list[FlagSpec] = []
        for f, tp, meta, value, known in metas:
            if meta is not None:
                spec = self._annotated_spec(
                    f, tp, meta, value, known, has_default=f.right is not None
                )
                if spec is not None:
                    specs.append(spec)
        renames = self._from_cli_renames()
        for mod in self.mods:
            specs.extend(self._argparse_specs(mod, renames))
        return Catalog(flags=_merge(specs), declarations=declarations)

    def _arg_kwargs(self, call: Node) -> dict[str, Node]:
        args = call.child_by_field_name("arguments")
        if args is None:
            return {}
        pos, kws, _ = _kwargs(args)
        out = dict(zip(_ARG_FIELDS, pos, strict=False))
        out.update(kws)
        return out

    # -- annotated fields -----------------------------------------------------
    def _annotated_spec(
        self, f: _FieldInfo, tp: _T, meta: Node, default: object, known: bool, *, has_default: bool
    ) -> FlagSpec | None:
        ev = self.evaluator
        mod = f.mod
        if _is_stringish(meta):
            kw: dict[str, Node] = {}
            help_text = _text_of(meta)
        else:
            kw = self._arg_kwargs(meta)
            help_text = _text_of(kw.get("help")) if "help" in kw else ""
        if "no_cli" in kw and ev.eval(kw["no_cli"], mod) is True:
            return None

        def val(key: str) -> object:
            return ev.eval(kw[key], mod) if key in kw else None

        cli_name = val("cli_name")
        if not isinstance(cli_name, str) or not cli_name:
            cli_name = "--" + f.name.replace("_", "-")
        aliases = val("aliases")
        names = [cli_name] + (
            [a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else []
        )
        type_parser = _callable_name(kw.get("type_parser"))
        arg_nargs = val("nargs")
        arg_nargs = str(arg_nargs) if arg_nargs is not None and arg_nargs is not _UNKNOWN else None
        choices_node = kw.get("choices")
        choices = None
        choices_src = None
        if choices_node is not None and choices_node.type != "none":
            choices_src = ts.text(choices_node)
            c = ev.eval(choices_node, mod)
            choices = _jsonable(c) if isinstance(c, (list, tuple)) else None
            if choices is _UNKNOWN:
                choices = None
        const_v = val("const")
        const = const_v if const_v is not _UNKNOWN else None
        spec = FlagSpec(
            attr=f.name,
            flags=names,
            type=None,
            action=None,
            nargs=None,
            default=default if known else None,
            default_known=known if has_default else True,
            default_src=ts.text(f.right) if f.right is not None else None,
            choices=None,
            choices_src=None,
            help=help_text,
            required=False,
            deprecated=False,
            path=mod.rel,
            line=ts.start_line(f.node),
            layout="annotated_field",
            const=const,
        )
        if not has_default:
            spec.default, spec.default_known = None, True  # argparse default None
        if "action" in kw and kw["action"].type != "none":
            spec.action = _action_name(kw["action"])
            ak = ev.eval(kw["action_kwargs"], mod) if "action_kwargs" in kw else None
            if "action_kwargs" in kw and kw["action_kwargs"].type == "dictionary":
                for pair in kw["action_kwargs"].named_children:
                    if pair.type != "pair":
                        continue
                    k = _string_value(pair.child_by_field_name("key"))
                    v = pair.child_by_field_name("value")
                    if k == "type":
                        spec.type = _callable_name(v)
                    elif k == "nargs":
                        nv = ev.eval(v, mod)
                        spec.nargs = str(nv) if nv is not _UNKNOWN and nv is not None else None
                    elif k == "choices":
                        spec.choices_src = ts.text(v)
                        cv = ev.eval(v, mod)
                        spec.choices = _jsonable(cv) if isinstance(cv, (list, tuple)) else None
                    elif isinstance(k, str):
                        spec.extra[k] = (
                            _jsonable(ev.eval(v, mod))
                            if ev.eval(v, mod) is not _UNKNOWN
                            else ts.text(v)
                        )
            elif isinstance(ak, dict):
                spec.extra.update({str(k): v for k, v in ak.items()})
            explicit_nargs = "action_kwargs" in kw and '"nargs"' in ts.text(kw["action_kwargs"])
            self._apply_action(
                spec, spec.action, explicit_default=has_default, explicit_nargs=explicit_nargs
            )
            spec.deprecated = _is_deprecated(spec)
            return spec

        inner = _unwrap_optional(tp.args[0]) if tp.args else _T("<expr>", [], tp.node)
        if inner.head == "Literal":
            lit_vals = [ev.eval(a.node, mod) for a in inner.args]
            lit_vals = [v for v in lit_vals if v is not _UNKNOWN]
            spec.choices = choices if choices else _jsonable(lit_vals)  # type: ignore[assignment]
            spec.choices_src = choices_src if choices else ts.text(inner.node)
            first = type(lit_vals[0]).__name__ if lit_vals else "str"
            spec.type = type_parser or _infer_type(first)
        elif inner.head == "List" and type_parser is None:
            elem = inner.args[0].head if inner.args else "str"
            spec.type = _infer_type(elem)
            spec.nargs = arg_nargs or "+"
            if choices:
                spec.choices, spec.choices_src = choices, choices_src
        elif inner.head == "bool":
            spec.action = "store_true"
            if not has_default:
                spec.default, spec.default_known = False, True
        else:
            spec.type = type_parser or _infer_type(inner.head)
            if choices:
                spec.choices, spec.choices_src = choices, choices_src
            spec.nargs = arg_nargs
            req = val("required")
            spec.required = req is True or (req is None and not has_default)
        if choices_src and spec.choices_src is None:
            spec.choices_src = choices_src
        spec.deprecated = _is_deprecated(spec)
        return spec

    # -- custom argparse actions -------------------------------------------------
    def _collect_action_classes(self) -> None:
        for mod in self.mods:
            for name, cls in mod.classes.items():
                supers = cls.child_by_field_name("superclasses")
                if supers is None or "Action" not in ts.text(supers):
                    continue
                params: dict[str, tuple[bool, object]] = {}
                body = cls.child_by_field_name("body")
                for fn in body.named_children if body is not None else []:
                    fdef = fn if fn.type == "function_definition" else None
                    if fdef is None or ts.text(fdef.child_by_field_name("name")) != "__init__":
                        continue
                    plist = fdef.child_by_field_name("parameters")
                    for p in plist.named_children if plist is not None else []:
                        if p.type in ("default_parameter", "typed_default_parameter"):
                            pname = ts.text(p.child_by_field_name("name"))
                            v = self.evaluator.eval(p.child_by_field_name("value"), mod)
                            params[pname] = (v is not _UNKNOWN, v if v is not _UNKNOWN else None)
                self.action_classes[name] = params

    def _apply_action(
        self,
        spec: FlagSpec,
        action: str | None,
        *,
        explicit_default: bool,
        explicit_nargs: bool = False,
    ) -> None:
        if action is None or action in _BUILTIN_ACTIONS:
            if not explicit_default:
                if action == "store_true":
                    spec.default, spec.default_known = False, True
                elif action == "store_false":
                    spec.default, spec.default_known = True, True
                else:
                    spec.default, spec.default_known = None, True
            return
        if action == "BooleanOptionalAction":
            flags: list[str] = []
            for opt in spec.flags:
                flags.append(opt)
                if opt.startswith("--"):
                    flags.append("--no-" + opt[2:])
            spec.flags = flags
            if not explicit_default:
                spec.default, spec.default_known = None, True
            return
        params = self.action_classes.get(action, {})
        if not explicit_nargs and spec.nargs is None and "nargs" in params and params["nargs"][0]:
            n = params["nargs"][1]
            spec.nargs = str(n) if n is not None else None
        if spec.const is None and "const" in params and params["const"][0]:
            spec.const = _jsonable(params["const"][1])
        if not explicit_default:
            if "default" in params and params["default"][0]:
                spec.default, spec.default_known = _jsonable(params["default"][1]), True
            else:
                spec.default, spec.default_known = None, True

    # -- argparse calls --------------------------------------------------------
    def _from_cli_renames(self) -> dict[str, str]:
        """``args.tp_size = args.tensor_parallel_size`` in ServerArgs.from_cli_args: dest -> attr."""
        renames: dict[str, str] = {}
        for mod in self.mods:
            cls = mod.classes.get("ServerArgs")
            if cls is None:
                continue
            for node in ts.walk(cls):
                if node.type != "function_definition":
                    continue
                if ts.text(node.child_by_field_name("name")) != "from_cli_args":
                    continue
                for a in ts.walk(node):
                    if a.type != "assignment":
                        continue
                    left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
                    if (
                        left is not None
                        and right is not None
                        and left.type == "attribute"
                        and right.type == "attribute"
                        and ts.text(left.child_by_field_name("object")) == "args"
                        and ts.text(right.child_by_field_name("object")) == "args"
                    ):
                        renames[ts.text(right.child_by_field_name("attribute"))] = ts.text(
                            left.child_by_field_name("attribute")
                        )
        return renames

    def _argparse_specs(self, mod: _Module, renames: dict[str, str]) -> list[FlagSpec]:
        out: list[FlagSpec] = []
        for node in ts.walk(mod.root):
            if node.type != "call":
                continue
            fn = node.child_by_field_name("function")
            if fn is None or fn.type != "attribute":
                continue
            if ts.text(fn.child_by_field_name("attribute")) != "add_argument":
                continue
            args = node.child_by_field_name("arguments")
            if args is None:
                continue
            spec = self._argparse_spec(mod, node, args, renames)
            if spec is not None:
                out.append(spec)
        return out

    def _argparse_spec(
        self, mod: _Module, call: Node, args: Node, renames: dict[str, str]
    ) -> FlagSpec | None:
        pos, kws, splat = _kwargs(args)
        if splat or not pos:
            return None
        names = [_string_value(p) for p in pos]
        if any(not isinstance(n, str) for n in names) or not all(n.startswith("-") for n in names):  # type: ignore[union-attr]
            return None  # dynamic names or positionals
        flags: list[str] = names  # type: ignore[assignment]
        scope = _local_scope(call)
        ev = self.evaluator

        def lit(key: str) -> object:
            return ev.eval(kws[key], mod, scope) if key in kws else None

        dest = lit("dest")
        if not isinstance(dest, str):
            long = [n for n in flags if n.startswith("--")]
            dest = (long[0] if long else flags[0]).lstrip("-").replace("-", "_")
        attr = renames.get(dest, dest)
        action = _action_name(kws.get("action"))
        type_name = _callable_name(kws.get("type"))
        nargs_v = lit("nargs")
        nargs = str(nargs_v) if nargs_v is not None and nargs_v is not _UNKNOWN else None
        default_node = kws.get("default")
        if default_node is not None:
            dv = ev.eval(default_node, mod, scope)
            dv = _jsonable(dv) if dv is not _UNKNOWN else _UNKNOWN
            default, known, default_src = (
                (None, False, ts.text(default_node))
                if dv is _UNKNOWN
                else (dv, True, ts.text(default_node))
            )
        else:
            default, known, default_src = None, True, None
        choices = choices_src = None
        if "choices" in kws and kws["choices"].type != "none":
            choices_src = ts.text(kws["choices"])
            cv = ev.eval(kws["choices"], mod, scope)
            cv = _jsonable(cv) if isinstance(cv, (list, tuple)) else None
            choices = cv if isinstance(cv, list) else None
        const_v = lit("const")
        req = lit("required")
        spec = FlagSpec(
            attr=attr,
            flags=flags,
            type=type_name,
            action=action,
            nargs=nargs,
            default=default,
            default_known=known,
            default_src=default_src,
            choices=choices,
            choices_src=choices_src,
            help=_text_of(kws.get("help")),
            required=req is True,
            deprecated=False,
            path=mod.rel,
            line=ts.start_line(call),
            layout="argparse",
            const=const_v if const_v is not _UNKNOWN else None,
            dest=dest if dest != attr else None,
        )
        for k, v in kws.items():
            if k in (
                "dest",
                "action",
                "type",
                "nargs",
                "default",
                "choices",
                "help",
                "required",
                "const",
                "metavar",
            ):
                continue
            ev_v = ev.eval(v, mod, scope)
            spec.extra[k] = _jsonable(ev_v) if ev_v is not _UNKNOWN else ts.text(v)
        self._apply_action(
            spec, action, explicit_default=default_node is not None, explicit_nargs="nargs" in kws
        )
        spec.deprecated = _is_deprecated(spec)
        return spec


def _has_ns_path(cls: Node) -> bool:
    body = cls.child_by_field_name("body")
    if body is None:
        return False
    for stmt in body.named_children:
        if stmt.type == "expression_statement" and ts.text(stmt).startswith("_NS_PATH"):
            return True
    return False


_ASSIGN_CACHE: dict[tuple[int, int], list[tuple[int, str, Node]]] = {}


def _local_scope(call: Node) -> _Scope:
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
            if node.type == "assignment":
                left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
                if left is not None and right is not None and left.type == "identifier":
                    assigns.append((node.start_byte, ts.text(left), right))
        _ASSIGN_CACHE[key] = assigns
    return {name: right for start, name, right in assigns if start < call.start_byte}


def _is_deprecated(spec: FlagSpec) -> bool:
    if spec.action and "deprecat" in spec.action.lower():
        return True
    return bool(spec.help and _DEPRECATED_HELP.search(spec.help))


def _nargs_kind(spec: FlagSpec) -> str:
    """``"0"`` when the flag takes no value tokens, else its nargs ("1" for a single value)."""
    if spec.action in (
        "store_true",
        "store_false",
        "store_const",
        "append_const",
        "count",
        "help",
        "version",
        "BooleanOptionalAction",
    ):
        return "0"
    if spec.nargs is None:
        return "1"
    return spec.nargs


def _merge(specs: list[FlagSpec]) -> list[FlagSpec]:
    """Fold specs writing the same attr into one when they parse alike (same arity, deprecation)."""
    out: list[FlagSpec] = []
    seen_flags: set[str] = set()
    by_attr: dict[str, list[FlagSpec]] = {}
    for spec in specs:
        spec.flags = [f for f in spec.flags if f not in seen_flags]  # argparse would reject re-use
        if not spec.flags:
            continue
        seen_flags.update(spec.flags)
        target = None
        for cand in by_attr.get(spec.attr, []):
            if (
                _nargs_kind(cand) == _nargs_kind(spec)
                and cand.deprecated == spec.deprecated
                and (cand.action == spec.action or {cand.action, spec.action} <= {None, "store"})
            ):
                target = cand
                break
        if target is None:
            by_attr.setdefault(spec.attr, []).append(spec)
            out.append(spec)
            continue
        target.flags.extend(spec.flags)
        for name in ("type", "choices", "choices_src", "help", "default_src"):
            if getattr(target, name) in (None, "") and getattr(spec, name) not in (None, ""):
                setattr(target, name, getattr(spec, name))
        if not target.default_known and spec.default_known:
            target.default, target.default_known = spec.default, True
        target.required = target.required or spec.required
        for k, v in spec.extra.items():
            target.extra.setdefault(k, v)
    return out


def extract_catalog(package_dir: Path) -> Catalog:
    """Build the flag catalog of the release unpacked at ``package_dir`` (the ``sglang/`` folder)."""
    try:
        return _Extractor(Path(package_dir)).run()
    finally:
        _ASSIGN_CACHE.clear()
