"""Checks (``assert`` and ``raise``) with their guards, and how a call is named.

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

References to the argument objects' fields are extracted by :mod:`ingest.refs`, with
what this module also holds for it and for :mod:`ingest.calls`: :func:`callee_name`
(which function a call runs) and :func:`guards_of` (a node's guard chain).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from ingest import ts
from ingest.prebuilt import resolve_prebuilt
from kb.code_types import Guard

__all__ = ["INDIRECT", "Check", "callee_name", "extract_checks", "guards_of"]


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
