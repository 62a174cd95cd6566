"""Checks (``assert`` and ``raise``) and argument-attribute references.

A *check* is a statement that can stop a launch: every ``assert`` (bare or
with a message) and every ``raise``. For each we record

* the exception type (``AssertionError`` for asserts), whether it is bare;
* the source of the tested condition and of the message;
* every line the statement spans, and where its test starts and ends (the
  line a traceback reports depends on the Python version); for a ``raise``
  whose exception or message was built earlier in the function (``err =
  ValueError(...); raise err``, ``msg = f"..."; raise ValueError(msg)``), the
  type and message are the built ones (:mod:`ingest.prebuilt`), the lines stay
  the raise's (a frame points there) and ``test_start``/``test_end`` hold the
  lines of the statement that built them;
* the guard chain: enclosing ``if``/``elif``/``else``/``while`` conditions with
  their polarity, outermost first, plus *early exits* — an earlier sibling
  ``if C: return`` means the check only runs when ``not C``.

*References* are reads and writes of fields on the argument objects SGLang
validates (``self.X`` inside ``ServerArgs``, ``server_args.X``, ``cfg.X``,
``args.X``, ``resolved_view(server_args).X``), including the writes of the
0.5.19+ pipeline: keyword arguments of ``declare_resolution(server_args,
source, X=...)`` and string keys of dicts returned by resolution hooks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

from ingest import ts
from ingest.prebuilt import resolve_prebuilt
from kb.code_types import Guard

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
class Check:
    kind: str  # "assert" | "raise"
    exc_type: str | None
    bare: bool
    condition: str | None  # assert test; None for raise (its guards are the condition)
    message: str | None
    start_line: int
    end_line: int
    test_start: int | None  # assert: its test's lines; raise: the lines that built it, if earlier
    test_end: int | None
    guards: list[Guard] = field(default_factory=list)
    source: str = ""


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


#: Calls whose n-th positional argument is the function actually run.
INDIRECT = {"run_hook": 0, "run_post_process_pass": 1}


def callee_name(call: Node) -> str:
    """The name of the function ``call`` runs: ``f`` for ``f(x)``, ``self.f(x)`` and
    ``run_hook(f, x)``; ``""`` when it has none (a subscript, a lambda, a non-name hook).

    The one callee resolver of the project: checks, references and call sites
    (:mod:`ingest.calls`) all name calls through it."""
    func = call.child_by_field_name("function")
    if func is None:
        return ""
    if func.type == "identifier":
        name = ts.text(func)
    elif func.type == "attribute":
        name = ts.text(func.child_by_field_name("attribute"))
    else:
        return ""
    if name in INDIRECT:
        args = call.child_by_field_name("arguments")
        pos = [
            c
            for c in (args.named_children if args is not None else [])
            if c.type not in ("keyword_argument", "comment")
        ]
        idx = INDIRECT[name]
        return ts.text(pos[idx]) if len(pos) > idx and pos[idx].type == "identifier" else ""
    return name


def _if_chain_conditions(if_node: Node) -> list[tuple[str, int, Node | None]]:
    """(condition, line, block) for the ``if`` and each ``elif`` of an if statement."""
    out: list[tuple[str, int, Node | None]] = []
    cond = if_node.child_by_field_name("condition")
    out.append((ts.text(cond), ts.start_line(if_node), if_node.child_by_field_name("consequence")))
    for alt in if_node.children_by_field_name("alternative"):
        if alt.type == "elif_clause":
            c = alt.child_by_field_name("condition")
            out.append((ts.text(c), ts.start_line(alt), alt.child_by_field_name("consequence")))
    return out


def _exits(block: Node | None) -> bool:
    """Does ``block`` end in a ``return``/``raise``/``continue``/``break``?"""
    statements = (
        [c for c in block.named_children if c.type != "comment"] if block is not None else []
    )
    if not statements:
        return False
    last = statements[-1]
    return last.type in (
        "return_statement",
        "raise_statement",
        "continue_statement",
        "break_statement",
    )


def guards_of(node: Node) -> list[Guard]:
    """Guard chain of ``node`` up to its enclosing function (outermost first)."""
    guards: list[Guard] = []
    child = node
    cur = node.parent
    while cur is not None and cur.type not in ("function_definition", "class_definition", "module"):
        level: list[Guard] = []
        if cur.type == "block":
            # early exits among the previous siblings of ``child`` in this block
            for sib in cur.named_children:
                if sib.id == child.id:
                    break
                if (
                    sib.type == "if_statement"
                    and not sib.children_by_field_name("alternative")
                    and _exits(sib.child_by_field_name("consequence"))
                ):
                    cond = sib.child_by_field_name("condition")
                    level.append(Guard(ts.text(cond), False, ts.start_line(sib), "early_exit"))
        elif cur.type == "if_statement":
            chain = _if_chain_conditions(cur)
            cons = cur.child_by_field_name("consequence")
            if cons is not None and cons.id == child.id:
                level.append(Guard(chain[0][0], True, chain[0][1], "if"))
        elif cur.type == "elif_clause":
            parent_if = cur.parent
            chain = _if_chain_conditions(parent_if) if parent_if is not None else []
            for cond, line, block in chain:
                if block is not None and block.parent is not None and block.parent.id == cur.id:
                    level.append(Guard(cond, True, line, "elif"))
                    break
                level.append(Guard(cond, False, line, "elif"))
        elif (
            cur.type == "else_clause"
            and cur.parent is not None
            and cur.parent.type == "if_statement"
        ):
            for cond, line, _ in _if_chain_conditions(cur.parent):
                level.append(Guard(cond, False, line, "else"))
        elif cur.type == "while_statement":
            cond = cur.child_by_field_name("condition")
            body = cur.child_by_field_name("body")
            if body is not None and body.id == child.id:
                level.append(Guard(ts.text(cond), True, ts.start_line(cur), "while"))
        elif cur.type == "case_clause":
            pattern = [c for c in cur.named_children if c.type == "case_pattern"]
            subject = cur.parent.parent if cur.parent is not None else None
            subj = ts.text(subject.child_by_field_name("subject")) if subject is not None else "?"
            if pattern:
                level.append(
                    Guard(f"{subj} == {ts.text(pattern[0])}", True, ts.start_line(cur), "match")
                )
        guards[:0] = level
        child = cur
        cur = cur.parent
    return guards


def _unparenthesize(node: Node | None) -> Node | None:
    """The expression inside redundant parentheses (Python's AST has no paren nodes)."""
    while node is not None and node.type == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        if len(inner) != 1:
            break
        node = inner[0]
    return node


def _string_literal(node: Node | None) -> str | None:
    return ts.text(node) if node is not None else None


def extract_checks(root: Node, found: dict[str, list[Node]] | None = None) -> list[Check]:
    """Every ``assert`` and ``raise`` under ``root`` with its guards.

    ``found`` may carry the tree's ``a`` and ``r`` captures already (see
    :func:`ts.statement_captures`).
    """
    if found is None:
        found = ts.statement_captures(root)
    checks: list[Check] = []
    for node in found.get("a", []):
        exprs = [c for c in node.named_children if c.type != "comment"]
        test = exprs[0] if exprs else None
        inner = _unparenthesize(test)
        msg = exprs[1] if len(exprs) > 1 else None
        checks.append(
            Check(
                kind="assert",
                exc_type="AssertionError",
                bare=msg is None,
                condition=ts.text(test) if test is not None else None,
                message=_string_literal(msg),
                start_line=ts.start_line(node),
                end_line=ts.end_line(node),
                test_start=ts.start_line(inner) if inner is not None else None,
                test_end=ts.end_line(inner) if inner is not None else None,
                guards=guards_of(node),
                source=ts.text(node),
            )
        )
    for node in found.get("r", []):
        exc = node.named_children[0] if node.named_children else None
        exc_type: str | None = None
        message: str | None = None
        bare = True
        if exc is not None:
            if exc.type == "call":
                exc_type = ts.text(exc.child_by_field_name("function")).rsplit(".", 1)[-1]
                args = exc.child_by_field_name("arguments")
                positional = [
                    a
                    for a in (args.named_children if args else [])
                    if a.type not in ("keyword_argument", "comment")
                ]
                if positional:
                    message = ts.text(positional[0])
                    bare = False
            else:
                exc_type = ts.text(exc).rsplit(".", 1)[-1]
        built = resolve_prebuilt(node)  # ``err = ValueError(...); raise err``, ``raise E(msg)``
        if built is not None:
            exc_type = built.exc_type or exc_type
            message = built.message
            bare = message is None
        checks.append(
            Check(
                kind="raise",
                exc_type=exc_type,
                bare=bare,
                condition=None,
                message=message,
                start_line=ts.start_line(node),
                end_line=ts.end_line(node),
                test_start=built.start_line if built else None,
                test_end=built.end_line if built else None,
                guards=guards_of(node),
                source=ts.text(node),
            )
        )
    checks.sort(key=lambda c: c.start_line)
    return checks


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


def _in_class(node: Node, names: frozenset[str]) -> bool:
    cur = node.parent
    while cur is not None:
        if cur.type == "class_definition":
            return ts.text(cur.child_by_field_name("name")) in names
        cur = cur.parent
    return False
