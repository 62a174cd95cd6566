"""Thin helpers over py-tree-sitter (>= 0.25) and the Python grammar.

Tree-sitter works in bytes and 0-based rows; everything this module returns
is in the 1-based, inclusive line numbers that Python tracebacks use.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import tree_sitter_python
from tree_sitter import Language, Node, Parser, Query, QueryCursor, Tree


@lru_cache(maxsize=1)
def language() -> Language:
    return Language(tree_sitter_python.language())


def parser() -> Parser:
    """A new parser (parsers are not shared across threads)."""
    return Parser(language())


def parse(source: bytes) -> Tree:
    return parser().parse(source)


#: Everything ingest needs from a file, as one query. It visits every node, so ingest
#: runs it only on trees with syntax errors; clean trees go through
#: :func:`statement_captures` and ``refs.ref_candidates``, which find the same nodes.
FILE_QUERY = (
    "(function_definition) @f (assert_statement) @a (raise_statement) @r "
    "(attribute) @attr (call) @call (return_statement) @ret"
)


@lru_cache(maxsize=64)
def query(pattern: str) -> Query:
    return Query(language(), pattern)


def captures(pattern: str, node: Node) -> dict[str, list[Node]]:
    """Run a tree-sitter query with ``QueryCursor`` and return its captures by name."""
    return QueryCursor(query(pattern)).captures(node)


#: Node types that may hold statements (and so functions, asserts and raises).
_STATEMENT_HOLDERS = frozenset(
    {
        "block",
        "function_definition",
        "class_definition",
        "decorated_definition",
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
        "match_statement",
        "case_clause",
    }
)


def statement_captures(root: Node) -> dict[str, list[Node]]:
    """The ``f`` (functions), ``a`` (asserts) and ``r`` (raises) captures of
    :data:`FILE_QUERY`, found by walking statements only, in document order.

    Functions, asserts and raises are statements, and statements only occur in
    the bodies of compound statements, so expressions (most of a tree's nodes)
    are never entered; that makes this about 2.5x cheaper than the query, which
    visits every node. A tree with syntax errors may hold statements inside
    ``ERROR`` nodes anywhere, so it is handed to the whole query instead, whose
    ``attr``/``call``/``ret`` captures then serve ``refs.extract_refs`` too
    (the tree is queried once).
    """
    if root.has_error:
        return captures(FILE_QUERY, root)
    found: dict[str, list[Node]] = {"f": [], "a": [], "r": []}
    _visit_statements(root, found["f"], found["a"], found["r"])
    return found


def _visit_statements(
    node: Node, functions: list[Node], asserts: list[Node], raises: list[Node]
) -> None:
    # (a plain function, not a closure: a recursive closure is a reference cycle that
    # would keep every node it found, and so the tree, alive until the next collection)
    for child in node.named_children:
        kind = child.type
        if kind in _STATEMENT_HOLDERS:
            if kind == "function_definition":
                functions.append(child)
            _visit_statements(child, functions, asserts, raises)
        elif kind == "assert_statement":
            asserts.append(child)
        elif kind == "raise_statement":
            raises.append(child)


def text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", errors="replace")


def start_line(node: Node) -> int:
    """1-based first line of ``node``."""
    return node.start_point[0] + 1


def end_line(node: Node) -> int:
    """1-based last line of ``node`` (a node ending at column 0 ends on the line before)."""
    row, col = node.end_point
    if col == 0 and row > node.start_point[0]:
        return row
    return row + 1


def walk(node: Node) -> Iterator[Node]:
    """Pre-order walk of every named and anonymous descendant, ``node`` included."""
    cursor = node.walk()
    visited_children = False
    while True:
        if not visited_children:
            yield cursor.node  # type: ignore[misc]
            if cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            visited_children = False
            continue
        if not cursor.goto_parent():
            return
        visited_children = True


def error_lines(tree: Tree) -> list[int]:
    """1-based lines holding ERROR or MISSING nodes (empty for a clean parse)."""
    if not tree.root_node.has_error:
        return []
    lines: set[int] = set()
    for node in walk(tree.root_node):
        if node.type == "ERROR" or node.is_missing:
            lines.add(start_line(node))
    return sorted(lines)


#: Statements that hold module-level statements (:func:`module_names` never enters a
#: function or class body).
_MODULE_LEVEL_HOLDERS = frozenset(
    {
        "block",
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
        "match_statement",
        "case_clause",
    }
)


def module_names(root: Node) -> frozenset[str]:
    """Names bound at module level: imports, assignments, functions and classes, also
    under module-level ``if``/``try``/``with`` (never inside a function or class)."""
    names: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        for child in node.named_children:
            kind = child.type
            if kind in _MODULE_LEVEL_HOLDERS:
                stack.append(child)
            elif kind in ("import_statement", "import_from_statement"):
                _import_names(child, names)
            elif kind == "decorated_definition":
                definition = child.child_by_field_name("definition")
                if definition is not None:
                    names.add(text(definition.child_by_field_name("name")))
            elif kind in ("function_definition", "class_definition"):
                names.add(text(child.child_by_field_name("name")))
            elif kind == "expression_statement":
                expr = child.named_children[0] if child.named_child_count else None
                while expr is not None and expr.type == "assignment":
                    left = expr.child_by_field_name("left")
                    if left is not None:
                        names.update(
                            text(n)
                            for n in ([left] if left.type == "identifier" else left.named_children)
                            if n.type == "identifier"
                        )
                    expr = expr.child_by_field_name("right")
    return frozenset(names)


def _import_names(stmt: Node, names: set[str]) -> None:
    module = stmt.child_by_field_name("module_name")
    for child in stmt.children_by_field_name("name"):
        if module is not None and child.id == module.id:
            continue
        if child.type == "aliased_import":
            alias = child.child_by_field_name("alias")
            names.add(text(alias))
        elif stmt.type == "import_statement":  # ``import a.b`` binds ``a``
            names.add(text(child).split(".", 1)[0])
        else:  # ``from m import a`` binds ``a``
            names.add(text(child).rsplit(".", 1)[-1])
