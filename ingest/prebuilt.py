"""Exceptions and messages built before the ``raise`` that throws them.

Two common styles put what a ``raise`` throws on an earlier line of the same function::

    err = NotImplementedError("a pipeline rank that ends on ...")   # built here
    _note_origin(err, origins[0])
    raise err                                                        # the frame points here

    msg = ("req_to_token_pool memory leak detected!"
           f"available_size={len(free)}, ")                          # built here
    raise ValueError(msg)                                            # the frame points here

Read statement by statement, the first ``raise`` has no exception type or message and the
second has the bare name ``msg`` as its message, so neither could be found from a logged
message. :func:`resolve_prebuilt` looks up, inside the raise's own function (nested
functions and classes are not entered), the name's **last binding before the raise** in
source order:

* ``raise NAME`` — the binding ``NAME = Call(...)`` of a callee named like an exception
  (``…Error``, ``…Exception``, ``…Warning`` or a builtin exception class) gives the
  exception type and the message (the call's first positional argument, itself resolved
  once more when it is a name: ``err = ValueError(msg)``);
* ``raise Exc(NAME, ...)`` — the binding ``NAME = <string>`` (a literal, an f-string,
  implicit concatenation, ``+``, ``%`` or ``"...".format(...)``) gives the message, and
  ``NAME += <string>`` statements that follow it **in the same block** (so always run
  with it) are appended with ``+``; augmentations under a further ``if`` are left out,
  since the message may lack them.

Any other last binding (``except ... as err``: a re-raise; a loop target; a tuple
unpacking such as ``ok, msg = check()``; a call that is not an exception) leaves the raise
as it reads. Source order is not control flow: when two branches assign the name, the later
one in the text wins, which is the one most raises follow directly. The lines of the
binding that built the exception or message are returned so the check can cite both.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from tree_sitter import Node

from ingest import ts

__all__ = ["Prebuilt", "exception_like", "resolve_prebuilt"]

#: builtin exception classes (``KeyError``, ``StopIteration``, ``SystemExit``, ...)
_BUILTIN_EXCEPTIONS = frozenset(
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
)
_SCOPES = frozenset({"function_definition", "class_definition", "lambda", "module"})
_STRINGY = frozenset({"string", "concatenated_string"})
#: nodes that hold statements (or an ``as`` pattern): the only ones walked into
_CONTAINERS = frozenset(
    {
        "module",
        "block",
        "expression_statement",
        "if_statement",
        "elif_clause",
        "else_clause",
        "for_statement",
        "while_statement",
        "try_statement",
        "except_clause",
        "except_group_clause",
        "finally_clause",
        "with_statement",
        "with_clause",
        "with_item",
        "match_statement",
        "case_clause",
    }
)
#: nodes of a function looked at for a binding (bounds the walk; statements only)
_MAX_NODES = 20_000


@dataclass(frozen=True)
class Prebuilt:
    """What the raise throws, as built earlier: ``exc_type`` is None when only the message
    was prebuilt; ``message`` the source of the message expression, None when the
    exception was built without one; ``start_line``/``end_line`` the binding's lines."""

    exc_type: str | None
    message: str | None
    start_line: int
    end_line: int


def exception_like(callee: str) -> bool:
    """Is ``callee`` (a last dotted part) the name of an exception class?"""
    return callee.endswith(("Error", "Exception", "Warning")) or callee in _BUILTIN_EXCEPTIONS


def _scope(node: Node) -> Node | None:
    cur = node.parent
    while cur is not None and cur.type not in _SCOPES:
        cur = cur.parent
    return cur


def _unwrap(node: Node | None) -> Node | None:
    while node is not None and node.type == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        if len(inner) != 1:
            break
        node = inner[0]
    return node


def _string_like(node: Node | None) -> bool:
    """A message-building expression: a string, an f-string, implicit concatenation,
    ``a + b`` / ``a % b`` with a string on the left, or ``"...".format(...)``."""
    node = _unwrap(node)
    if node is None:
        return False
    if node.type in _STRINGY:
        return True
    if node.type == "binary_operator":
        op = node.child_by_field_name("operator")
        return (
            op is not None
            and ts.text(op) in ("+", "%")
            and _string_like(node.child_by_field_name("left"))
        )
    if node.type == "call":
        fn = node.child_by_field_name("function")
        return (
            fn is not None
            and fn.type == "attribute"
            and ts.text(fn.child_by_field_name("attribute")) == "format"
            and _string_like(fn.child_by_field_name("object"))
        )
    return False


def _bindings(scope: Node, name: str, before: int) -> list[Node]:
    """Statements of ``scope`` (not of nested scopes) that bind ``name`` and start before
    byte ``before``, in source order: ``assignment``/``augmented_assignment`` nodes,
    ``except ... as name`` / ``with ... as name`` patterns and ``for name in`` loops.
    Only statements and the clauses holding them are walked, never expressions."""
    out: list[Node] = []
    body = scope.child_by_field_name("body") if scope.type != "module" else scope
    stack = [body] if body is not None else []
    seen = 0
    while stack and seen < _MAX_NODES:
        node = stack.pop()
        seen += 1
        if node.start_byte >= before:
            continue
        if node.type in ("assignment", "augmented_assignment"):
            left = node.child_by_field_name("left")
            if left is not None and name in _target_names(left):
                out.append(node)
            continue
        if node.type == "as_pattern":
            alias = node.child_by_field_name("alias")
            if alias is not None and ts.text(alias).strip() == name:
                out.append(node)
            continue
        if node.type == "for_statement":
            left = node.child_by_field_name("left")
            if left is not None and name in _target_names(left):
                out.append(node)
        if node.type in _CONTAINERS:
            stack.extend(reversed(node.named_children))
    out.sort(key=lambda n: n.start_byte)
    return out


def _target_names(left: Node) -> set[str]:
    if left.type == "identifier":
        return {ts.text(left)}
    if left.type in ("pattern_list", "tuple_pattern", "list_pattern", "expression_list"):
        return {n for c in left.named_children for n in _target_names(c)}
    return set()


def _last_binding(raise_node: Node, name: str) -> Node | None:
    scope = _scope(raise_node)
    if scope is None:
        return None
    found = _bindings(scope, name, raise_node.start_byte)
    return found[-1] if found else None


def _message_of(raise_node: Node, name: str) -> Prebuilt | None:
    """``NAME = <string>`` (+ unconditional ``NAME += <string>``) before ``raise_node``."""
    scope = _scope(raise_node)
    if scope is None:
        return None
    found = _bindings(scope, name, raise_node.start_byte)
    base_at = next(
        (i for i in range(len(found) - 1, -1, -1) if found[i].type == "assignment"), None
    )
    if base_at is None:
        return None
    base = found[base_at]
    value = base.child_by_field_name("right")
    left = base.child_by_field_name("left")
    if left is None or left.type != "identifier" or not _string_like(value):
        return None
    parts = [ts.text(_unwrap(value))]
    end = base
    for aug in found[base_at + 1 :]:
        if aug.type != "augmented_assignment":
            return None  # bound by something else after the string: not resolvable
        op = aug.child_by_field_name("operator")
        more = aug.child_by_field_name("right")
        if op is None or ts.text(op) != "+=" or not _string_like(more):
            return None
        if (
            aug.parent is not None
            and base.parent is not None
            and aug.parent.parent is not None
            and base.parent.parent is not None
            and aug.parent.parent.id == base.parent.parent.id
        ):  # same block: always runs
            parts.append(ts.text(_unwrap(more)))
            end = aug
    return Prebuilt(None, " + ".join(parts), ts.start_line(base), ts.end_line(end))


def _first_positional(call: Node) -> Node | None:
    args = call.child_by_field_name("arguments")
    pos = [
        a
        for a in (args.named_children if args is not None else [])
        if a.type not in ("keyword_argument", "comment", "list_splat", "dictionary_splat")
    ]
    return pos[0] if pos else None


def resolve_prebuilt(raise_node: Node) -> Prebuilt | None:
    """What ``raise_node`` throws when it was built earlier in its function (see the
    module docstring); None when the raise reads as written."""
    exc = raise_node.named_children[0] if raise_node.named_children else None
    if exc is None:
        return None
    if exc.type == "identifier":
        binding = _last_binding(raise_node, ts.text(exc))
        if binding is None or binding.type != "assignment":
            return None
        left = binding.child_by_field_name("left")
        value = _unwrap(binding.child_by_field_name("right"))
        if left is None or left.type != "identifier" or value is None or value.type != "call":
            return None
        fn = value.child_by_field_name("function")
        callee = ts.text(fn).rsplit(".", 1)[-1] if fn is not None else ""
        if not exception_like(callee):
            return None
        first = _first_positional(value)
        message = ts.text(first) if first is not None else None
        if first is not None and first.type == "identifier":
            inner = _message_of(binding, ts.text(first))
            message = inner.message if inner is not None else message
        return Prebuilt(callee, message, ts.start_line(binding), ts.end_line(binding))
    if exc.type == "call":
        first = _first_positional(exc)
        if first is not None and first.type == "identifier":
            return _message_of(raise_node, ts.text(first))
    return None
