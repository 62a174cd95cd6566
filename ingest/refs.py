"""Argument-attribute references: reads and writes of the fields SGLang validates.

*References* are reads and writes of fields on the argument objects SGLang
validates (``self.X`` inside ``ServerArgs``, ``server_args.X``, ``cfg.X``,
``args.X``, ``resolved_view(server_args).X``), including the writes of the
0.5.19+ pipeline: keyword arguments of ``declare_resolution(server_args,
source, X=...)`` and string keys of dicts returned by resolution hooks.

Receivers and callees are found in the text first (:func:`ref_candidates`), then
confirmed in the tree; calls are named by :func:`ingest.checks.callee_name` and each
write carries its guards (:func:`ingest.checks.guards_of`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

from ingest import ts
from ingest.checks import callee_name, guards_of
from kb.code_types import Guard

__all__ = ["ARG_OBJECTS", "DECLARE_CALLS", "VIEW_CALLS", "Ref", "extract_refs", "ref_candidates"]

#: Names that denote the argument object being validated.
ARG_OBJECTS = frozenset({"server_args", "cfg", "args", "sa"})
_ARG_OBJECT_BYTES = frozenset(n.encode() for n in ARG_OBJECTS)
#: Calls that return a view of the argument object (attribute reads pass through).
VIEW_CALLS = frozenset({"resolved_view", "resolving_view", "ResolvedView"})
#: Calls whose keyword arguments are writes of fields.
DECLARE_CALLS = frozenset({"declare_resolution"})
#: Callee names :func:`extract_refs` looks at among all calls.
_REF_CALL_BYTES = frozenset(n.encode() for n in (*DECLARE_CALLS, "setattr"))


def _ref_words(receivers: frozenset[bytes]) -> re.Pattern[bytes]:
    """One pass over the text finds all three kinds of word :func:`ref_candidates`
    looks up: group 1 a receiver, group 2 a callee, group 3 ``return``."""

    def alt(names: frozenset[bytes]) -> bytes:
        return b"|".join(sorted(map(re.escape, names)))

    return re.compile(
        rb"\b(?:(" + alt(receivers) + rb")|(" + alt(_REF_CALL_BYTES) + rb")|(return))\b"
    )


#: Where a reference can start in the source text (see :func:`ref_candidates`).
_REF_WORDS = _ref_words(_ARG_OBJECT_BYTES)
_REF_WORDS_SELF = _ref_words(_ARG_OBJECT_BYTES | {b"self"})


@dataclass
class Ref:
    attr: str
    kind: str  # "read" | "write" | "declare" | "return_dict"
    line: int
    obj: str  # the receiver as written: "self", "server_args", "cfg", "resolved_view(server_args)"
    value: str | None = None  # source of the written value
    guards: list[Guard] = field(default_factory=list)


def _callee_bytes(call: Node) -> bytes:
    """:func:`callee_name` of a direct call as raw bytes, without decoding (for quick rejection)."""
    fn = call.child_by_field_name("function")
    if fn is None:
        return b""
    if fn.type == "attribute":
        fn = fn.child_by_field_name("attribute")
    return (fn.text or b"") if fn is not None else b""


def _receiver(obj: Node, in_args_class: bool) -> str | None:
    """The printed receiver if ``obj`` denotes the argument object, else None."""
    if obj.type == "identifier":
        name = ts.text(obj)
        if name in ARG_OBJECTS or (name == "self" and in_args_class):
            return name
        return None
    if obj.type == "call" and callee_name(obj) in VIEW_CALLS:
        args = obj.child_by_field_name("arguments")
        first = args.named_children[0] if args is not None and args.named_children else None
        if (
            first is not None
            and first.type == "identifier"
            and (ts.text(first) in ARG_OBJECTS or (ts.text(first) == "self" and in_args_class))
        ):
            return ts.text(obj)
    return None


def _assigned_value(attr_node: Node) -> tuple[bool, str | None]:
    """Is ``attr_node`` an assignment target? Then also the source of the value."""
    child = attr_node
    cur = attr_node.parent
    while cur is not None and cur.type in (
        "pattern_list",
        "tuple_pattern",
        "list_pattern",
        "parenthesized_expression",
        "expression_list",
        "tuple",
    ):
        child, cur = cur, cur.parent
    if cur is not None and cur.type in ("assignment", "augmented_assignment"):
        left = cur.child_by_field_name("left")
        if left is not None and left.id == child.id:
            right = cur.child_by_field_name("right")
            return True, ts.text(right) if right is not None else None
    return False, None


def _identifier_at(root: Node, start: int, end: int) -> Node | None:
    """The identifier node spanning exactly bytes ``start``..``end``, if there is one
    (a word in a string or a comment, or part of a longer name, is not)."""
    node = root.named_descendant_for_byte_range(start, end)
    if (
        node is None
        or node.type != "identifier"
        or node.start_byte != start
        or node.end_byte != end
    ):
        return None
    return node


def ref_candidates(root: Node, *, with_self: bool) -> dict[str, list[Node]]:
    """The ``attr``, ``call`` and ``ret`` nodes :func:`extract_refs` can take a
    reference from, found from the text instead of by visiting every node.

    A reference's receiver is a name of :data:`ARG_OBJECTS` (or ``self`` when
    ``with_self``): each occurrence of such a word in the source is looked up
    in the tree, and kept when it is an identifier that is an attribute's object
    (``server_args.X``) or an argument of a call that is one
    (``resolved_view(server_args).X``). Likewise a ``setattr`` or
    ``declare_resolution`` callee, and a ``return`` keyword. The result holds
    every node of the full query's ``attr``/``call``/``ret`` captures that
    :func:`extract_refs` could keep (and few others), each once (two of them
    may start at the same byte: ``args.resolved_view(server_args).x``). Only
    for trees without syntax errors, whose nodes nest as the grammar says.
    """
    source = root.text or b""
    at = root.start_byte  # ``root.text`` starts there (a module starts at its first token)
    attrs: dict[int, Node] = {}
    calls: dict[int, Node] = {}
    rets: dict[int, Node] = {}
    for m in (_REF_WORDS_SELF if with_self else _REF_WORDS).finditer(source):
        kind = m.lastindex
        if kind == 3:
            keyword = root.descendant_for_byte_range(at + m.start(), at + m.end())
            ret = keyword.parent if keyword is not None and keyword.type == "return" else None
            if ret is not None and ret.type == "return_statement":
                rets.setdefault(ret.id, ret)
            continue
        name = _identifier_at(root, at + m.start(), at + m.end())
        parent = name.parent if name is not None else None
        if parent is None:
            continue
        if kind == 2:  # a callee: ``setattr(...)`` or ``x.declare_resolution(...)``
            if parent.type == "attribute":
                parent = parent.parent
            if parent is not None and parent.type == "call":
                calls.setdefault(parent.id, parent)
            continue
        if parent.type == "argument_list":  # a view call's argument
            parent = parent.parent
            if parent is None or parent.type != "call":
                continue
            name, parent = parent, parent.parent
            if parent is None:
                continue
        if parent.type == "attribute" and parent.child(0) == name:
            attrs.setdefault(parent.id, parent)
    return {"attr": list(attrs.values()), "call": list(calls.values()), "ret": list(rets.values())}


def extract_refs(
    root: Node,
    found: dict[str, list[Node]] | None = None,
    *,
    args_classes: frozenset[str] = frozenset({"ServerArgs"}),
) -> list[Ref]:
    """Reads and writes of argument-object fields under ``root``.

    ``self.X`` counts only inside a class named in ``args_classes``. ``found``
    may carry the ``attr``/``call``/``ret`` captures of :data:`ts.FILE_QUERY`
    (:func:`ts.statement_captures` gives them for a tree with syntax errors);
    without them the candidates come from :func:`ref_candidates` (or from the
    query, for a tree with syntax errors).
    """
    refs: list[Ref] = []
    # ``self`` can only denote the argument object in a file that names an args class
    source = root.text or b""
    self_possible = any(n.encode() in source for n in args_classes)
    if found is None or "attr" not in found:
        found = (
            ts.captures(ts.FILE_QUERY, root)
            if root.has_error
            else ref_candidates(root, with_self=self_possible)
        )
    for node in found.get("attr", []):
        obj = node.child_by_field_name("object")
        if obj is None:
            continue
        is_self = False
        if obj.type == "identifier":  # fast path: most receivers are other names
            receiver_name = obj.text
            if receiver_name == b"self":
                if not self_possible:
                    continue
                is_self = True
            elif receiver_name not in _ARG_OBJECT_BYTES:
                continue
        name = node.child_by_field_name("attribute")
        if name is None:
            continue
        in_cls = _in_class(node, args_classes) if is_self else False
        receiver = _receiver(obj, in_cls)
        if receiver is None:
            continue
        is_write, value = _assigned_value(node)
        refs.append(
            Ref(
                ts.text(name),
                "write" if is_write else "read",
                ts.start_line(node),
                receiver,
                value,
                guards_of(node) if is_write else [],
            )
        )
    for call in found.get("call", []):
        if _callee_bytes(call) not in _REF_CALL_BYTES:  # fast path: most calls are not refs
            continue
        callee = callee_name(call)
        args = call.child_by_field_name("arguments")
        if args is None:
            continue
        if callee in DECLARE_CALLS:
            for kw in args.named_children:
                if kw.type == "keyword_argument":
                    key = ts.text(kw.child_by_field_name("name"))
                    refs.append(
                        Ref(
                            key,
                            "declare",
                            ts.start_line(kw),
                            callee,
                            ts.text(kw.child_by_field_name("value")),
                            guards_of(call),
                        )
                    )
                elif kw.type == "dictionary_splat":
                    refs.extend(_splat_writes(call, kw, callee))
        elif callee == "setattr":
            pos = args.named_children
            if len(pos) >= 3 and pos[1].type == "string" and _receiver(pos[0], True):
                key = ts.text(pos[1]).strip("\"'")
                refs.append(
                    Ref(
                        key,
                        "write",
                        ts.start_line(call),
                        ts.text(pos[0]),
                        ts.text(pos[2]),
                        guards_of(call),
                    )
                )
    for ret in found.get("ret", []):
        value = ret.named_children[0] if ret.named_children else None
        if value is None or value.type != "dictionary":
            continue
        for pair in value.named_children:
            if pair.type != "pair":
                continue
            key = pair.child_by_field_name("key")
            if key is not None and key.type == "string":
                text = ts.text(key).strip("\"'")
                if text.isidentifier():
                    refs.append(
                        Ref(
                            text,
                            "return_dict",
                            ts.start_line(pair),
                            "return",
                            ts.text(pair.child_by_field_name("value")),
                            guards_of(ret),
                        )
                    )
    refs.sort(key=lambda r: (r.line, r.attr, r.kind))
    return refs


def _splat_writes(call: Node, splat: Node, callee: str) -> list[Ref]:
    """The writes of ``declare_resolution(server_args, source, **fields)`` whose ``fields``
    is a local dict: the string keys the function gives it before the call
    (``fields = {"x": ...}``, ``fields["x"] = ...``), each under its own guards and the
    call's (but for ``if fields:``, which holds whenever a key was given)."""
    inner = splat.named_children[0] if splat.named_children else None
    if inner is None or inner.type != "identifier":
        return []  # ``**helper(...)``: its keys are not known here
    name = ts.text(inner)
    fn = call.parent
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    if fn is None:
        return []
    around = [g for g in guards_of(call) if g.condition.strip() != name]
    out: list[Ref] = []
    stack = [c for c in fn.named_children if c.type == "block"]
    while stack:
        node = stack.pop()
        if node.start_byte >= call.start_byte or node.type in ("function_definition", "lambda"):
            continue
        stack.extend(node.named_children)
        if node.type != "assignment":
            continue
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is None or right is None:
            continue
        pairs: list[tuple[Node, Node, Node]] = []  # (key, value, where)
        if left.type == "identifier" and ts.text(left) == name and right.type == "dictionary":
            for pair in right.named_children:
                key, value = pair.child_by_field_name("key"), pair.child_by_field_name("value")
                if pair.type == "pair" and key is not None and value is not None:
                    pairs.append((key, value, pair))
        elif left.type == "subscript" and ts.text(left.child_by_field_name("value")) == name:
            key = left.child_by_field_name("subscript")
            if key is not None:
                pairs.append((key, right, node))
        guards = guards_of(node)
        guards += [g for g in around if g not in guards]
        for key, value, where in pairs:
            text = ts.text(key).strip("\"'")
            if key.type == "string" and text.isidentifier():
                out.append(
                    Ref(text, "declare", ts.start_line(where), callee, ts.text(value), guards)
                )
    return out


def _in_class(node: Node, names: frozenset[str]) -> bool:
    cur = node.parent
    while cur is not None:
        if cur.type == "class_definition":
            return ts.text(cur.child_by_field_name("name")) in names
        cur = cur.parent
    return False
