"""A tree-sitter view of the modules of an unpacked SGLang release, for static reading.

:class:`ModuleLoader` parses ``sglang/...`` files on demand into :class:`SourceModule`
records (top-level constants, imports, classes and functions), resolving relative
and star imports by module name; nothing is ever imported or executed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tree_sitter import Node

from ingest import ts

__all__ = [
    "ModuleLoader",
    "SourceModule",
    "from_import_names",
    "name_assignment",
    "name_assignments",
    "resolve_from",
]


@dataclass
class SourceModule:
    name: str  # dotted, e.g. "sglang.srt.server_args"
    rel: str  # "sglang/srt/server_args.py"
    root: Node
    constants: dict[str, Node]  # top-level NAME = expr (last wins)
    imports: dict[str, tuple[str, str]]  # local name -> (module, name)
    classes: dict[str, Node]
    functions: dict[str, Node]
    star_imports: list[str]


class ModuleLoader:
    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self.modules: dict[str, SourceModule | None] = {}

    def module_path(self, dotted: str) -> Path | None:
        parts = dotted.split(".")
        if not parts or parts[0] != self.package_dir.name:
            return None
        base = self.package_dir.joinpath(*parts[1:])
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand
        return None

    def load(self, dotted: str) -> SourceModule | None:
        if dotted not in self.modules:
            path = self.module_path(dotted)
            self.modules[dotted] = self._parse(dotted, path) if path else None
        return self.modules[dotted]

    def load_path(self, path: Path) -> SourceModule:
        rel = path.relative_to(self.package_dir.parent)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        dotted = ".".join(parts)
        mod = self.load(dotted)
        assert mod is not None
        return mod

    def _parse(self, dotted: str, path: Path) -> SourceModule:
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
                constants.update(name_assignments(stmt))
            elif stmt.type == "import_from_statement":
                src_mod = resolve_from(stmt, dotted, is_pkg)
                if src_mod is None:
                    continue
                if any(c.type == "wildcard_import" for c in stmt.named_children):
                    stars.append(src_mod)
                imports.update(from_import_names(stmt, src_mod))
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
        return SourceModule(dotted, rel, root, constants, imports, classes, functions, stars)


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


def from_import_names(stmt: Node, src_mod: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for child in stmt.children_by_field_name("name"):
        if child.type == "aliased_import":
            name = ts.text(child.child_by_field_name("name"))
            alias = ts.text(child.child_by_field_name("alias"))
        else:
            name = alias = ts.text(child)
        out[alias] = (src_mod, name)
    return out


def resolve_from(stmt: Node, current: str, is_pkg: bool) -> str | None:
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


def name_assignment(node: Node) -> tuple[str, Node] | None:
    """``(name, value)`` when ``node`` is an assignment ``name = value`` (annotated or not)."""
    if node.type != "assignment":
        return None
    left = node.child_by_field_name("left")
    right = node.child_by_field_name("right")
    if left is not None and left.type == "identifier" and right is not None:
        return ts.text(left), right
    return None


def name_assignments(stmt: Node) -> list[tuple[str, Node]]:
    """The ``name = value`` assignments directly inside a statement, in source order."""
    return [a for c in stmt.named_children if (a := name_assignment(c)) is not None]
