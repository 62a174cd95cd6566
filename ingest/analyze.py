"""The structural rows of one file: what a parse worker computes.

:func:`analyze_file` parses one file once with tree-sitter and returns every
row it contributes to the index (``files``, ``functions``, ``chunks``,
``checks``, ``calls``, ``registrations``) plus its *unfiltered* attribute
references. Which references are indexed depends on the release's flag
catalog (see :func:`keep_refs`), so the filter is applied by the caller; the
unfiltered list is also stored, zlib'd, in ``files.all_refs``, which lets a
later release reuse the file's rows without parsing it again and still filter
its refs by its own catalog.

Everything here is pure and picklable: :func:`analyze_batch` runs in worker
processes.
"""

from __future__ import annotations

import bisect
import gc
import hashlib
import json
import zlib
from dataclasses import dataclass, field

from tree_sitter import Tree

from ingest import ts
from ingest.calls import extract_calls
from ingest.checks import extract_checks
from ingest.chunker import FunctionInfo, chunk_file
from ingest.refs import extract_refs
from ingest.registries import extract_registrations
from kb.store import pack_text

#: Files whose refs are worth extracting must mention one of these.
REF_MARKERS = (b"server_args", b"ServerArgs", b"cfg.", b"args.")

#: Row tables a batch returns, in insert order.
TABLES = ("files", "functions", "chunks", "checks", "calls", "registrations")


@dataclass
class BatchRows:
    """Rows of a batch of files, ready for :meth:`ReleaseWriter.add`."""

    tables: dict[str, list[tuple]] = field(default_factory=lambda: {t: [] for t in TABLES})
    refs: list[tuple] = field(default_factory=list)  # unfiltered, in ``refs`` column order
    errors: dict[str, list[int]] = field(default_factory=dict)
    files: int = 0


class _Enclosing:
    """Innermost enclosing function of a line, by bisection over sorted starts."""

    def __init__(self, functions: list[FunctionInfo]) -> None:
        self.functions = functions  # sorted by (start_line, qualname)
        self.starts = [f.start_line for f in functions]

    def function(self, line: int) -> FunctionInfo | None:
        """The innermost function holding ``line`` (None outside any): the function with
        the latest start whose range holds ``line`` (the last one in sort order among
        equal starts)."""
        for i in range(bisect.bisect_right(self.starts, line) - 1, -1, -1):
            fn = self.functions[i]
            if fn.end_line >= line:
                return fn
        return None

    def qualname(self, line: int) -> str:
        """The qualname of :meth:`function` (``<module>`` outside any function)."""
        fn = self.function(line)
        return fn.qualname if fn is not None else "<module>"


def analyze_file(v: str, path: str, blob: bytes, out: BatchRows) -> Tree:
    """Append every structural row of one file to ``out``; returns the parse tree."""
    tree = ts.parse(blob)
    errors = ts.error_lines(tree)
    text = blob.decode("utf-8", "replace")
    wants_refs = any(m in blob for m in REF_MARKERS)
    found = ts.statement_captures(tree.root_node)
    fc = chunk_file(path, tree.root_node, blob, found, text)
    rows = out.tables
    rows["functions"].extend(
        (
            v,
            path,
            fn.qualname,
            fn.name,
            fn.class_name,
            fn.start_line,
            fn.end_line,
            fn.decorator_start,
            fn.signature,
            json.dumps(fn.decorators),
            fn.docstring,
            fn.parent,
        )
        for fn in fc.functions
    )
    rows["chunks"].extend(
        (
            ch.id,
            v,
            path,
            ch.qualname,
            ch.kind,
            ch.start_line,
            ch.end_line,
            ch.part,
            ch.parts,
            ch.text_hash,
            ch.text,
        )
        for ch in fc.chunks
    )
    where = _Enclosing(fc.functions)
    checks = extract_checks(tree.root_node, found)
    rows["checks"].extend(
        (
            None,
            v,
            path,
            where.qualname(ck.start_line),
            ck.kind,
            ck.exc_type,
            int(ck.bare),
            ck.condition,
            ck.message,
            ck.start_line,
            ck.end_line,
            ck.test_start,
            ck.test_end,
            json.dumps([g.as_dict() for g in ck.guards]),
            ck.source,
        )
        for ck in checks
    )
    rows["calls"].extend(
        extract_calls(v, path, tree.root_node, fc.functions, bool(checks), where.function)
    )
    rows["registrations"].extend(
        (v, path, r.registry, json.dumps(list(r.keys)), r.target, r.line, r.kind)
        for r in extract_registrations(tree.root_node, blob)
    )
    refs: list[list] = []
    if wants_refs:
        refs = [
            [
                where.qualname(r.line),
                r.attr,
                r.kind,
                r.line,
                r.obj,
                r.value,
                json.dumps([g.as_dict() for g in r.guards]),
            ]
            for r in extract_refs(tree.root_node, found)
        ]
        out.refs.extend((v, path, *r) for r in refs)
    rows["files"].append(
        (
            v,
            path,
            hashlib.sha256(blob).hexdigest(),
            text.count("\n") + 1,
            json.dumps(errors[:50]),
            pack_text(text),
            zlib.compress(json.dumps(refs).encode(), 1) if refs else None,
        )
    )
    if errors:
        out.errors[path] = errors[:20]
    out.files += 1
    return tree


def analyze_batch(job: tuple[str, list[tuple[str, bytes]]]) -> BatchRows:
    """Rows of a batch of ``(path, source)`` files (runs in a worker process).

    The cyclic garbage collector is paused meanwhile: the batch allocates
    many small, acyclic objects (rows, tree-sitter nodes) that it would only
    scan in vain. The batch's parse trees are freed together at its end, not
    each after its file: over 0.5.23 that measured 3-6 % less CPU (batches
    alternating between the two ways in one process), presumably as the
    parser then allocates from consolidated memory rather than from the
    scattered chunks of the tree just freed. A batch holds at most 512 KB of
    source, so the trees held stay small.
    """
    v, items = job
    out = BatchRows()
    trees: list[Tree] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for path, blob in items:
            trees.append(analyze_file(v, path, blob, out))
        trees.clear()
    finally:
        if was_enabled:
            gc.enable()
    return out


def keep_refs(refs: list[tuple], known_attrs: frozenset[str]) -> list[tuple]:
    """The refs worth indexing: those of catalogued attributes (all when there is no
    catalog). Rows are in ``refs`` column order, so the attribute is ``row[3]``."""
    if not known_attrs:
        return refs
    return [r for r in refs if r[3] in known_attrs]


def stored_refs(v: str, path: str, all_refs: list[list]) -> list[tuple]:
    """``refs`` rows of ``path`` in release ``v`` from a stored ``files.all_refs`` list."""
    return [(v, path, *r) for r in all_refs]


def batches(
    items: list[tuple[str, bytes]], *, max_bytes: int = 1 << 19, max_files: int = 64
) -> list[list[tuple[str, bytes]]]:
    """Consecutive batches of about ``max_bytes`` of source (or ``max_files`` files)."""
    out: list[list[tuple[str, bytes]]] = []
    cur: list[tuple[str, bytes]] = []
    size = 0
    for item in items:
        cur.append(item)
        size += len(item[1])
        if size >= max_bytes or len(cur) >= max_files:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out
