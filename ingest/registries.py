"""Registrations: the entries SGLang puts into the registries start-up looks up.

SGLang picks many implementations by name from registries filled at import
time, and a lookup miss stops the launch (``Runner backend
MoeRunnerBackend.FLASHINFER_TRTLLM requires a fused func for a2a backend
deepep, but none is registered``). To answer such a crash with what a release
*does* register, ingest records every registration it can read off the source,
declaratively, whatever the registry:

``decorator``
    ``@register_fused_func("none", "triton")``, ``@CustomOp.register("silu")``:
    a decorator call whose callee's last name starts with ``register`` (leading
    underscores aside) and that has string-constant arguments. Keys are the
    positional strings in order, then string keyword values; the target is the
    decorated function or class.
``call``
    ``register_draft_binder("dense", _bind_dense)``,
    ``AttentionBackendRegistry.register("fa3", handle_fa3)`` and a decorator
    applied by hand, ``register_pre_permute("a", "b")(fn)``: a call statement of
    such a callee whose arguments start with string constants (or, without
    positional arguments, has string keyword values). The target is the first
    other argument. A method call only counts on a receiver that can be a
    registry: a name bound at module level (an import, a module constant) or a
    capitalised name; ``self.register_buffer("x", t)`` or
    ``layer.register_parameter("w", w)`` on a local object are not registrations.
``dict``
    ``QUANTIZATION_METHODS = {"fp8": Fp8Config, "awq": AWQConfig}``: a dict
    literal with at least two entries assigned to a module-level or class-level
    name (or to ``self.NAME`` in ``__init__``) whose keys are all string constants
    or all ``Enum.MEMBER`` (the member's name is the key), and whose name looks
    like a registry (:func:`looks_like_registry`). One row per entry.
``subscript``
    ``BACKENDS["fa3"] = FA3Backend``: a subscript assignment with a constant key
    to such a name, at module level, or in a function when the name is bound at
    module level (a function filling a global registry; a local dict is not one).

For a decorator or call the registry is the callee's last name
(``register_fused_func``, however it is reached); a bare ``register`` method is
named with its receiver (``CustomOp.register``) so that different registries
with a generic method stay apart. For a dict or subscript it is the assigned
name.

Candidates are found in the text by linear-time regexes and confirmed in the
tree (see :class:`_Extractor`), so most statements are never visited: over
0.5.23's 4,719 files this costs about 0.5 s of CPU in all, next to about 18 s
for the rest of the per-file analysis (parse included). Every string kept is bounded, and so are the
rows of one file (:data:`MAX_ROWS`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from tree_sitter import Node

from ingest import ts

__all__ = ["MAX_ROWS", "Registration", "extract_registrations", "looks_like_registry"]

#: At most this many registrations are kept per file (in source order).
MAX_ROWS = 2000
#: At most this many keys per registration, each at most :data:`MAX_KEY` characters.
MAX_KEYS = 16
MAX_KEY = 200
#: Targets and registry names are cut to this many characters.
MAX_TARGET = 120
#: String literals longer than this (in bytes, quotes included) are not keys.
_MAX_LITERAL = 512

#: Name parts (case-insensitive) that make a dict or subscript target look like a registry.
REGISTRY_WORDS = (
    "registry",
    "backend",
    "mapping",
    "map",
    "methods",
    "configs",
    "parser",
    "detector",
    "_cls",
    "_classes",
)

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Registration:
    registry: str
    keys: tuple[str, ...]
    target: str
    line: int
    kind: str  # "decorator" | "call" | "dict" | "subscript"


def looks_like_registry(name: str) -> bool:
    """Does ``name`` read like a registry: ALL_CAPS, or holding one of :data:`REGISTRY_WORDS`?"""
    low = name.lower()
    if any(word in low for word in REGISTRY_WORDS):
        return True
    return any(c.isalpha() for c in name) and name == name.upper()


def _is_register(name: str) -> bool:
    return name.lstrip("_").startswith("register")


def _short(node: Node | None, limit: int = MAX_TARGET) -> str:
    """The source of ``node`` on one line, at most ``limit`` characters."""
    if node is None or node.text is None:
        return ""
    raw = node.text[: limit * 4].decode("utf-8", "replace")
    flat = _WS.sub(" ", raw).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _const_str(node: Node | None) -> str | None:
    """The value of a plain string literal (no f-string, no bytes), else None."""
    if node is None or node.type != "string" or node.text is None or len(node.text) > _MAX_LITERAL:
        return None
    if any(c.type == "interpolation" for c in node.named_children):
        return None
    try:
        value = ast.literal_eval(node.text.decode("utf-8", "replace"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value[:MAX_KEY] if isinstance(value, str) else None


def _enum_member(node: Node | None) -> str | None:
    """``MEMBER`` of ``Enum.MEMBER`` / ``pkg.Enum.MEMBER`` (the enum's name capitalised)."""
    if node is None or node.type != "attribute":
        return None
    obj = node.child_by_field_name("object")
    attr = node.child_by_field_name("attribute")
    if obj is None or attr is None:
        return None
    owner = obj.child_by_field_name("attribute") if obj.type == "attribute" else obj
    if owner is None or owner.type != "identifier" or not ts.text(owner)[:1].isupper():
        return None
    return ts.text(attr)[:MAX_KEY]


def _root_name(node: Node) -> str | None:
    """The leftmost name of a dotted expression (``a`` of ``a.b.c``), else None."""
    while node.type == "attribute":
        obj = node.child_by_field_name("object")
        if obj is None:
            return None
        node = obj
    return ts.text(node) if node.type == "identifier" else None


def _registry_name(func: Node) -> str | None:
    """The registry a registering callee names (see the module docstring), else None."""
    if func.type == "identifier":
        name = ts.text(func)
        return name[:MAX_TARGET] if _is_register(name) else None
    if func.type != "attribute":
        return None
    attr = func.child_by_field_name("attribute")
    name = ts.text(attr)
    if not _is_register(name):
        return None
    if name.lstrip("_") == "register":
        obj = func.child_by_field_name("object")
        owner = (
            obj.child_by_field_name("attribute")
            if obj is not None and obj.type == "attribute"
            else obj
        )
        if owner is not None and owner.type == "identifier":
            name = f"{ts.text(owner)}.{name}"
    return name[:MAX_TARGET]


def _arguments(call: Node) -> tuple[list[Node], list[tuple[str, Node]]]:
    """Positional argument nodes and ``(name, value)`` keyword arguments of ``call``."""
    args = call.child_by_field_name("arguments")
    positional: list[Node] = []
    keywords: list[tuple[str, Node]] = []
    if args is None or args.type != "argument_list":
        return positional, keywords
    for a in args.named_children:
        if a.type == "keyword_argument":
            value = a.child_by_field_name("value")
            if value is not None:
                keywords.append((ts.text(a.child_by_field_name("name")), value))
        elif a.type != "comment":
            positional.append(a)
    return positional, keywords


def _decorator_keys(call: Node) -> tuple[str, ...]:
    """String positional arguments in order, then string keyword values."""
    positional, keywords = _arguments(call)
    keys = [s for s in map(_const_str, positional) if s is not None]
    keys += [s for s in (_const_str(v) for _, v in keywords) if s is not None]
    return tuple(keys[:MAX_KEYS])


def _call_keys(call: Node) -> tuple[tuple[str, ...], str] | None:
    """Keys and target of a registering call statement (None when it registers no key)."""
    positional, keywords = _arguments(call)
    keys: list[str] = []
    rest: list[Node] = []
    if positional:
        for a in positional:
            s = _const_str(a)
            if s is not None and not rest:
                keys.append(s)
            else:
                rest.append(a)
        rest += [v for _, v in keywords]
    else:
        for _, v in keywords:
            s = _const_str(v)
            if s is not None:
                keys.append(s)
            else:
                rest.append(v)
    if not keys:
        return None
    return tuple(keys[:MAX_KEYS]), _short(rest[0]) if rest else ""


def _scope(stmt: Node) -> str:
    """Where ``stmt`` runs: ``module``, ``class`` (a class body), ``init`` (an
    ``__init__`` defined directly in a class body) or ``function``."""
    cur = stmt.parent
    while cur is not None:
        if cur.type == "class_definition":
            return "class"
        if cur.type == "function_definition":
            if ts.text(cur.child_by_field_name("name")) != "__init__":
                return "function"
            holder = cur.parent
            if holder is not None and holder.type == "decorated_definition":
                holder = holder.parent
            owner = holder.parent if holder is not None and holder.type == "block" else None
            return "init" if owner is not None and owner.type == "class_definition" else "function"
        cur = cur.parent
    return "module"


def _is_child(node: Node, parent: Node | None, field: str) -> bool:
    """Is ``node`` the ``field`` child of ``parent``?"""
    if parent is None:
        return False
    child = parent.child_by_field_name(field)
    return child is not None and child.id == node.id


#: Where a registration can start in the source text; each hit is checked in the tree.
#: (Patterns that start with a literal character: the regex engine scans for it at C speed.)
_REGISTER_WORD = re.compile(rb"register")
_DICT_ASSIGN = re.compile(rb"=[ \t]{0,20}\{")  # the ``= {`` of ``NAME = {`` / ``NAME: T = {``
_SUBSCRIPT_ASSIGN = re.compile(rb"\][ \t]{0,20}=[^=]")  # the ``] =`` of ``NAME["key"] = X``


class _Extractor:
    """One file's registrations, found from candidate places in its text.

    Like ``refs.ref_candidates``, the text is searched (linear-time regexes)
    for where a registration can start: the word ``register``, an ``= {`` (a
    dict literal assigned), a ``] =`` (a subscript assigned); each hit is then
    looked up in the tree and kept only when the tree confirms it. Most
    statements are never visited. Rows of calls and decorators are collected first, then dicts
    and subscripts, up to :data:`MAX_ROWS` in all, and returned in source order.
    """

    def __init__(self, root: Node, source: bytes | None) -> None:
        self.root = root
        # the module's text and where it starts (``root.text`` starts at the first token)
        self.source, self.base = (
            (source, 0) if source is not None else (root.text or b"", root.start_byte)
        )
        self.rows: list[tuple[int, int, Registration]] = []  # (start byte, index, row)
        self._module_names: frozenset[str] | None = None

    @property
    def module_names(self) -> frozenset[str]:
        if self._module_names is None:
            self._module_names = ts.module_names(self.root)
        return self._module_names

    def full(self) -> bool:
        return len(self.rows) >= MAX_ROWS

    def add(
        self, at: Node, registry: str, keys: tuple[str, ...], target: str, kind: str, index: int = 0
    ) -> None:
        if not self.full():
            self.rows.append(
                (
                    at.start_byte,
                    index,
                    Registration(registry, keys, target, ts.start_line(at), kind),
                )
            )

    def run(self) -> list[Registration]:
        source, base = self.source, self.base
        seen: set[int] = set()
        for m in _REGISTER_WORD.finditer(source):
            if self.full():
                break
            node = self.root.descendant_for_byte_range(base + m.start(), base + m.end())
            if node is not None and node.type == "identifier" and node.id not in seen:
                seen.add(node.id)
                self.callee(node)
        for m in _DICT_ASSIGN.finditer(source):
            if self.full():
                break
            brace = self.root.descendant_for_byte_range(base + m.end() - 1, base + m.end())
            if brace is not None and brace.type == "{":
                self.dictionary(brace.parent)
        for m in _SUBSCRIPT_ASSIGN.finditer(source):
            if self.full():
                break
            bracket = self.root.descendant_for_byte_range(base + m.start(), base + m.start() + 1)
            if bracket is not None and bracket.type == "]":
                self.subscript(bracket.parent)
        self.rows.sort(key=lambda r: (r[0], r[1]))
        return [r for _, _, r in self.rows]

    # -- decorators and calls ------------------------------------------------------
    def callee(self, name: Node) -> None:
        """A registration through a call of ``name`` (an identifier holding ``register``)."""
        if not _is_register(ts.text(name)):
            return
        func = name.parent if _is_child(name, name.parent, "attribute") else name
        call = func.parent
        if call is None or call.type != "call" or not _is_child(func, call, "function"):
            return
        registry = _registry_name(func)
        holder = call.parent
        if registry is None or holder is None:
            return
        if holder.type == "decorator":
            keys = _decorator_keys(call)
            definition = (
                holder.parent.child_by_field_name("definition")
                if holder.parent is not None
                else None
            )
            target = (
                ts.text(definition.child_by_field_name("name")) if definition is not None else ""
            )
            if keys:
                self.add(holder, registry, keys, target[:MAX_TARGET], "decorator")
        elif holder.type == "call" and _is_child(call, holder, "function"):
            # ``register_x("a", "b")(fn)``: a decorator applied by hand
            positional, _ = _arguments(holder)
            keys = _decorator_keys(call)
            if keys and positional and _statement(holder) is not None:
                self.add(holder, registry, keys, _short(positional[0]), "call")
        elif holder.type == "expression_statement":
            if func.type == "attribute" and not self.registry_receiver(func):
                return
            found = _call_keys(call)
            if found is not None:
                self.add(call, registry, found[0], found[1], "call")

    def registry_receiver(self, func: Node) -> bool:
        """Can the receiver of ``func`` (``X.register``) be a registry? A name bound at
        module level or a capitalised one, never ``self``/``cls`` or a local object."""
        obj = func.child_by_field_name("object")
        root = _root_name(obj) if obj is not None else None
        if root is None or root in ("self", "cls"):
            return False
        return root[:1].isupper() or root in self.module_names

    # -- dicts and subscripts ---------------------------------------------------------
    def dictionary(self, node: Node | None) -> None:
        """Rows of a dict literal assigned to a registry-like name (see the module docstring)."""
        if node is None or node.type != "dictionary":
            return
        assign = node.parent
        if (
            assign is None
            or assign.type != "assignment"
            or not _is_child(node, assign, "right")
            or _statement(assign) is None
        ):
            return
        left = assign.child_by_field_name("left")
        if left is not None and left.type == "identifier":
            name, scopes = ts.text(left), ("module", "class")
        elif (
            left is not None
            and left.type == "attribute"
            and ts.text(left.child_by_field_name("object")) == "self"
        ):
            name, scopes = ts.text(left.child_by_field_name("attribute")), ("init",)
        else:
            return
        if not looks_like_registry(name) or _scope(assign) not in scopes:
            return
        pairs = [c for c in node.named_children if c.type == "pair"]
        if len(pairs) < 2:
            return
        keys = [_const_str(p.child_by_field_name("key")) for p in pairs]
        if not all(k is not None for k in keys):
            keys = [_enum_member(p.child_by_field_name("key")) for p in pairs]
            if not all(k is not None for k in keys):
                return
        for i, (pair, key) in enumerate(zip(pairs, keys, strict=True)):
            self.add(
                pair,
                name[:MAX_TARGET],
                (str(key),),
                _short(pair.child_by_field_name("value")),
                "dict",
                i,
            )

    def subscript(self, sub: Node | None) -> None:
        """The row of ``NAME["key"] = X`` for the subscript ``NAME["key"]``, if it is one."""
        if sub is None or sub.type != "subscript":
            return
        name = sub.child_by_field_name("value")
        if name is None or name.type != "identifier":
            return
        text = ts.text(name)
        if not looks_like_registry(text):
            return
        assign = sub.parent
        if (
            assign is None
            or assign.type != "assignment"
            or not _is_child(sub, assign, "left")
            or _statement(assign) is None
        ):
            return
        indexes = sub.children_by_field_name("subscript")
        if len(indexes) != 1:
            return
        if _scope(assign) != "module" and text not in self.module_names:
            return
        key = _const_str(indexes[0])
        if key is None:
            key = _enum_member(indexes[0])
        if key is not None:
            self.add(
                sub,
                text[:MAX_TARGET],
                (key,),
                _short(assign.child_by_field_name("right")),
                "subscript",
            )


def _statement(expr: Node) -> Node | None:
    """The expression statement ``expr`` is the whole of, if it is one."""
    stmt = expr.parent
    if stmt is None or stmt.type != "expression_statement" or stmt.named_child_count != 1:
        return None
    return stmt


def extract_registrations(root: Node, source: bytes | None = None) -> list[Registration]:
    """Every registration in the module ``root``, in source order (see the module docstring).

    ``source`` is the file's bytes when the caller has them (else ``root.text``)."""
    return _Extractor(root, source).run()
