"""Function-level chunking of Python source with tree-sitter.

Two products come out of one parse:

* :class:`FunctionInfo` rows: every function, method and nested function with
  its qualname (``ServerArgs._handle_speculative_decoding``,
  ``outer.<locals>.inner``), decorators, signature, docstring and exact
  1-based inclusive line range (the ``def`` line to the last body line, as
  Python's ``ast`` reports ``lineno``/``end_lineno``).
* :class:`Chunk` rows, the units of search and embedding. They tile the file:
  module-level statements, class-level statements (dataclass fields, say) and
  each top-level function or method. A unit too long for the embedding
  model's window is split at statement boundaries, recursing into compound
  statements, and the pieces are merged back (split-then-merge, as in cAST)
  at *content-defined* cut points: a statement whose own text hashes to an
  anchor starts a new chunk once the current one holds
  :data:`MIN_CHUNK_CHARS`, and no chunk exceeds :data:`MAX_CHUNK_CHARS`.
  Cuts therefore do not depend on what precedes them: an edit in one place
  of a long function changes the chunk it falls in (and rarely the next),
  not every later part.

Every chunk carries a header naming its path and qualname, and ``(part)``
when its unit was split, so no part is anonymous. The header deliberately
holds no line numbers and no part index: an unchanged function (or part)
whose lines moved, or that gained a part elsewhere, keeps the same embedding
text, so its vector is reused across releases.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field
from itertools import accumulate

from tree_sitter import Node

from ingest import ts

#: Budget of one chunk in non-whitespace characters. Python source averages
#: about 0.4 MiniLM word pieces per such character, so a chunk near the budget,
#: with its header, can exceed the model's 256-token window; with the cuts
#: below most chunks stay well under it (in 0.5.11's default scope about one
#: embedding text in eight is truncated at 256 tokens, against two in five
#: with the greedy packing used before).
MAX_CHUNK_CHARS = 700
#: A chunk is closed at an anchor statement only once it holds this much.
MIN_CHUNK_CHARS = 150
#: One statement in this many is an anchor (a content-defined cut point).
ANCHOR_ODDS = 3

_DEF_TYPES = ("function_definition", "class_definition")


@dataclass
class FunctionInfo:
    qualname: str
    name: str
    class_name: str | None
    start_line: int
    end_line: int
    decorator_start: int
    signature: str
    decorators: list[str]
    docstring: str | None
    is_async: bool
    parent: str | None  # qualname of the enclosing function or class, if any


@dataclass
class Chunk:
    path: str
    qualname: str
    kind: str  # "function" | "function_part" | "class" | "module"
    start_line: int
    end_line: int
    text: str
    part: int = 1
    parts: int = 1

    @property
    def header(self) -> str:
        """``# <path> :: <qualname>`` plus `` (part)`` for a piece of a split unit."""
        suffix = " (part)" if self.parts > 1 else ""
        return f"# {self.path} :: {self.qualname}{suffix}"

    @property
    def embed_text(self) -> str:
        """Header plus source: what is embedded and hashed (no line numbers)."""
        return f"{self.header}\n{self.text}"

    @property
    def text_hash(self) -> str:
        return hashlib.sha256(self.embed_text.encode()).hexdigest()

    @property
    def id(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}:{self.kind}"


@dataclass
class FileChunks:
    functions: list[FunctionInfo] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)


def _weight(text: str) -> int:
    return len(text) - text.count(" ") - text.count("\n") - text.count("\t")


def _def_node(node: Node) -> Node:
    """The function/class node inside a ``decorated_definition``."""
    if node.type == "decorated_definition":
        inner = node.child_by_field_name("definition")
        if inner is not None:
            return inner
    return node


def _scope_prefix(node: Node) -> tuple[str, str | None, str | None]:
    """(qualname prefix, enclosing class name, parent qualname) for a def node."""
    parts: list[str] = []
    class_name: str | None = None
    parent_q: str | None = None
    cur = node.parent
    while cur is not None:
        if cur.type == "class_definition":
            name = ts.text(cur.child_by_field_name("name"))
            parts.append(name)
        elif cur.type == "function_definition":
            name = ts.text(cur.child_by_field_name("name"))
            parts.append(f"{name}.<locals>")
        cur = cur.parent
    parts.reverse()
    owner = node.parent
    if owner is not None and owner.type == "decorated_definition":
        owner = owner.parent
    if owner is not None and owner.type == "block":
        owner = owner.parent
    if owner is not None and owner.type == "class_definition":
        class_name = ts.text(owner.child_by_field_name("name"))
    if parts:
        parent_q = ".".join(parts)
        if parent_q.endswith(".<locals>"):
            parent_q = parent_q[: -len(".<locals>")]
    return (".".join(parts) + "." if parts else ""), class_name, parent_q


def _docstring(body: Node | None) -> str | None:
    first = body.named_child(0) if body is not None else None
    if first is None:
        return None
    if first.type == "expression_statement" and first.named_child_count == 1:
        expr = first.named_children[0]
        if expr.type == "string":
            raw = ts.text(expr)
            for quote in ('"""', "'''", '"', "'"):
                idx = raw.find(quote)
                if idx != -1 and raw.endswith(quote) and len(raw) >= idx + 2 * len(quote):
                    return raw[idx + len(quote) : -len(quote)].strip()
            return raw
    return None


def function_info(node: Node, source: bytes) -> FunctionInfo:
    """Describe one ``function_definition`` node."""
    prefix, class_name, parent_q = _scope_prefix(node)
    name = ts.text(node.child_by_field_name("name"))
    body = node.child_by_field_name("body")
    decorators: list[str] = []
    decorator_start = ts.start_line(node)
    wrapper = node.parent
    if wrapper is not None and wrapper.type == "decorated_definition":
        decorators = [
            ts.text(d).lstrip("@").strip() for d in wrapper.children if d.type == "decorator"
        ]
        decorator_start = ts.start_line(wrapper)
    sig_end = body.start_byte if body is not None else node.end_byte
    signature = source[node.start_byte : sig_end].decode("utf-8", "replace").rstrip()
    signature = " ".join(signature.split()).removesuffix(":").rstrip()
    first = node.child(0)  # the grammar puts an ``async`` keyword first
    is_async = first is not None and first.type == "async"
    return FunctionInfo(
        qualname=prefix + name,
        name=name,
        class_name=class_name,
        start_line=ts.start_line(node),
        end_line=ts.end_line(node),
        decorator_start=decorator_start,
        signature=signature,
        decorators=decorators,
        docstring=_docstring(body),
        is_async=is_async,
        parent=parent_q,
    )


class _Text:
    """One file's lines with prefix sums of their weights (O(1) weight of any span)."""

    __slots__ = ("compact", "cum", "lines")

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        compact = text.replace(" ", "")
        if "\t" in compact:
            compact = compact.replace("\t", "")
        #: each line without spaces and tabs: its length is its weight
        self.compact = compact.split("\n")
        self.cum = [0, *accumulate(map(len, self.compact))]

    def weight(self, start: int, end: int) -> int:
        """:func:`_weight` of lines ``start``..``end`` (1-based, inclusive)."""
        return self.cum[end] - self.cum[start - 1]

    def text(self, start: int, end: int) -> str:
        return "\n".join(self.lines[start - 1 : end])

    def anchor(self, start: int, end: int) -> bool:
        """Whether a span is a content-defined cut point (a chunk may start at it).

        Decided by the span's own text only, without spaces and tabs, so the
        same statement is an anchor wherever it moves and however it is indented.
        """
        key = "\n".join(self.compact[start - 1 : end])
        return zlib.crc32(key.encode()) % ANCHOR_ODDS == 0


def _split_units(node: Node) -> list[Node]:
    """Statement-level children of a node's blocks, recursing into compound statements."""
    out: list[Node] = []
    for child in node.named_children:
        if child.type == "block":
            out.extend(child.named_children)
        elif child.type in (
            "elif_clause",
            "else_clause",
            "except_clause",
            "finally_clause",
            "case_clause",
            "block_clause",
        ):
            out.append(child)
    return out


def _split(node: Node, src: _Text) -> list[tuple[int, int]]:
    """Split ``node`` into line spans each within budget, at statement boundaries."""
    # (ts.start_line / ts.end_line / src.weight inlined: this runs for every statement
    # of every long unit)
    start = node.start_point[0] + 1
    row, col = node.end_point
    end = row if col == 0 and row >= start else row + 1
    if src.cum[end] - src.cum[start - 1] <= MAX_CHUNK_CHARS:
        return [(start, end)]
    children = _split_units(node)
    if not children:
        # An indivisible statement (a huge literal): one span per line, merged later.
        return [(i, i) for i in range(start, end + 1)]
    spans: list[tuple[int, int]] = []
    first_child = ts.start_line(children[0])
    if first_child > start:
        spans.append((start, first_child - 1))  # header of the compound statement
    for child in children:
        spans.extend(_split(child, src))
    # cover gaps (comments between statements) by extending the previous span
    filled: list[tuple[int, int]] = []
    for s, e in spans:
        if filled and s > filled[-1][1] + 1:
            filled[-1] = (filled[-1][0], s - 1)
        filled.append((s, e))
    if filled and filled[-1][1] < end:
        filled[-1] = (filled[-1][0], end)
    return filled


def _merge(spans: list[tuple[int, int]], src: _Text) -> list[tuple[int, int]]:
    """Group consecutive spans into chunks at content-defined cut points.

    A chunk is closed before a span that is an *anchor* (see
    :meth:`_Text.anchor`) once it holds at least :data:`MIN_CHUNK_CHARS`, and
    before any span that would take it over :data:`MAX_CHUNK_CHARS`. Because
    anchors depend on a span's own text, not on its position, an edit changes
    the chunk it falls in and cuts re-synchronise at the next anchor: the
    chunks after it keep their text, and so their vectors.
    """
    merged: list[tuple[int, int]] = []
    cum = src.cum  # src.weight(a, b) == cum[b] - cum[a - 1], inlined
    for s, e in spans:
        if merged:
            ms = merged[-1][0]
            held = cum[s - 1] - cum[ms - 1] if s > ms else 0
            if held + cum[e] - cum[s - 1] <= MAX_CHUNK_CHARS and not (
                held >= MIN_CHUNK_CHARS and src.anchor(s, e)
            ):
                merged[-1] = (ms, e)
                continue
        merged.append((s, e))
    return merged


def _unit_chunks(
    path: str,
    qualname: str,
    kind: str,
    node: Node,
    src: _Text,
    start: int | None = None,
) -> list[Chunk]:
    spans = _merge(_split(node, src), src)
    if start is not None and spans and spans[0][0] > start:
        spans[0] = (start, spans[0][1])
    if len(spans) == 1:
        s, e = spans[0]
        return [Chunk(path, qualname, kind, s, e, src.text(s, e))]
    part_kind = "function_part" if kind == "function" else kind
    return [
        Chunk(path, qualname, part_kind, s, e, src.text(s, e), i + 1, len(spans))
        for i, (s, e) in enumerate(spans)
    ]


def _group_statements(
    path: str, qualname: str, kind: str, stmts: list[Node], src: _Text
) -> list[Chunk]:
    """Chunk a run of loose statements (module or class level) by split-then-merge."""
    spans: list[tuple[int, int]] = []
    for stmt in stmts:
        spans.extend(_split(stmt, src))
    spans = _merge(spans, src)
    return [
        Chunk(path, qualname, kind, s, e, src.text(s, e), i + 1, len(spans))
        for i, (s, e) in enumerate(spans)
    ]


def _chunk_scope(
    path: str, scope_q: str, kind: str, stmts: list[Node], src: _Text, out: list[Chunk]
) -> None:
    loose: list[Node] = []

    def flush() -> None:
        if loose:
            out.extend(_group_statements(path, scope_q or "<module>", kind, loose, src))
            loose.clear()

    for stmt in stmts:
        inner = _def_node(stmt)
        if inner.type == "function_definition":
            flush()
            name = ts.text(inner.child_by_field_name("name"))
            q = f"{scope_q}.{name}" if scope_q else name
            out.extend(_unit_chunks(path, q, "function", inner, src, start=ts.start_line(stmt)))
        elif inner.type == "class_definition":
            flush()
            name = ts.text(inner.child_by_field_name("name"))
            q = f"{scope_q}.{name}" if scope_q else name
            body = inner.child_by_field_name("body")
            header_end = ts.start_line(body) - 1 if body is not None else ts.end_line(inner)
            members = body.named_children if body is not None else []
            class_out: list[Chunk] = []
            _chunk_scope(path, q, "class", members, src, class_out)
            if class_out and class_out[0].kind == "class":
                first = class_out[0]
                first.start_line = ts.start_line(stmt)
                first.text = src.text(first.start_line, first.end_line)
            elif header_end >= ts.start_line(stmt):
                s = ts.start_line(stmt)
                e = max(header_end, s)
                class_out.insert(0, Chunk(path, q, "class", s, e, src.text(s, e)))
            out.extend(class_out)
        else:
            loose.append(stmt)
    flush()


def chunk_file(
    path: str,
    tree_root: Node,
    source: bytes,
    found: dict[str, list[Node]] | None = None,
    text: str | None = None,
) -> FileChunks:
    """Functions and search chunks of one parsed file (``path`` is package-relative).

    ``found`` may carry the tree's ``f`` captures already (see
    :func:`ts.statement_captures`), ``text`` the decoded source.
    """
    src = _Text(text if text is not None else source.decode("utf-8", "replace"))
    result = FileChunks()
    if found is None:
        found = ts.statement_captures(tree_root)
    for node in found.get("f", []):
        result.functions.append(function_info(node, source))
    result.functions.sort(key=lambda f: (f.start_line, f.qualname))
    _chunk_scope(path, "", "module", tree_root.named_children, src, result.chunks)
    return result
