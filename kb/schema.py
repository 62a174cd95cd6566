"""The structured index's schema: tables, insert columns, keyword-index helpers.

See :mod:`kb.store` for what each table holds. ``SCHEMA_VERSION`` is written to
``meta``; :class:`kb.store.Store` migrates older indexes and refuses newer ones.
"""

from __future__ import annotations

import json
import re
import sqlite3
import zlib
from collections.abc import Sequence
from typing import Any

__all__ = ["COLUMNS", "COPIED", "FTS_HASH_BYTES", "RELEASE_TABLES", "SCHEMA", "SCHEMA_VERSION",
           "VALIDATION_PREFIXES", "dumps", "fts_body", "fts_query", "fts_rows", "pack_text"]

SCHEMA_VERSION = 3

#: The files where SGLang validates its launch flags: ``ServerArgs`` and its
#: ``_handle_*`` methods up to 0.5.18, the resolution hooks from 0.5.19.
VALIDATION_PREFIXES: tuple[str, ...] = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS releases (
    version TEXT PRIMARY KEY, origin TEXT, content_hash TEXT, status TEXT,
    files INTEGER, functions INTEGER, chunks INTEGER, checks INTEGER, refs INTEGER,
    flags INTEGER, parse_errors INTEGER, embedded_scope TEXT, ingested_at TEXT,
    timings TEXT
);
CREATE TABLE IF NOT EXISTS files (
    release TEXT, path TEXT, sha256 TEXT, lines INTEGER, parse_errors TEXT, text BLOB,
    all_refs BLOB, PRIMARY KEY (release, path)
);
CREATE TABLE IF NOT EXISTS functions (
    release TEXT, path TEXT, qualname TEXT, name TEXT, class_name TEXT,
    start_line INTEGER, end_line INTEGER, decorator_start INTEGER, signature TEXT,
    decorators TEXT, docstring TEXT, parent TEXT
);
CREATE INDEX IF NOT EXISTS functions_loc ON functions (release, path, start_line);
CREATE INDEX IF NOT EXISTS functions_name ON functions (release, name);
CREATE TABLE IF NOT EXISTS chunks (
    seq INTEGER PRIMARY KEY, id TEXT, release TEXT, path TEXT, qualname TEXT, kind TEXT,
    start_line INTEGER, end_line INTEGER, part INTEGER, parts INTEGER, text_hash TEXT,
    text TEXT, UNIQUE (release, id)
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5 (
    body, content = '', tokenize = 'unicode61'
);
DROP INDEX IF EXISTS chunks_hash;  -- schema 1's (unused), re-created by older code opening the KB
CREATE TABLE IF NOT EXISTS checks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, release TEXT, path TEXT, function TEXT,
    kind TEXT, exc_type TEXT, bare INTEGER, condition TEXT, message TEXT,
    start_line INTEGER, end_line INTEGER, test_start INTEGER, test_end INTEGER,
    guards TEXT, source TEXT
);
CREATE INDEX IF NOT EXISTS checks_loc ON checks (release, path, start_line);
CREATE INDEX IF NOT EXISTS checks_fn ON checks (release, function);
CREATE TABLE IF NOT EXISTS refs (
    release TEXT, path TEXT, function TEXT, attr TEXT, kind TEXT, line INTEGER,
    obj TEXT, value TEXT, guards TEXT
);
CREATE INDEX IF NOT EXISTS refs_attr ON refs (release, attr);
CREATE TABLE IF NOT EXISTS calls (
    release TEXT, path TEXT, callee TEXT, caller TEXT, caller_start INTEGER, line INTEGER,
    guards TEXT
);
CREATE INDEX IF NOT EXISTS calls_callee ON calls (release, path, callee);
CREATE TABLE IF NOT EXISTS flags (
    release TEXT, attr TEXT, flags TEXT, type TEXT, action TEXT, nargs TEXT,
    default_json TEXT, default_known INTEGER, default_src TEXT, choices TEXT,
    choices_src TEXT, help TEXT, required INTEGER, deprecated INTEGER, path TEXT,
    line INTEGER, layout TEXT
);
CREATE INDEX IF NOT EXISTS flags_attr ON flags (release, attr);
CREATE TABLE IF NOT EXISTS flag_spellings (
    release TEXT, spelling TEXT, attr TEXT, PRIMARY KEY (release, spelling)
);
CREATE TABLE IF NOT EXISTS declarations (
    release TEXT, attr TEXT, cls TEXT, annotation TEXT, default_json TEXT,
    default_known INTEGER, default_src TEXT, help TEXT, path TEXT, line INTEGER
);
CREATE INDEX IF NOT EXISTS declarations_attr ON declarations (release, attr);
CREATE TABLE IF NOT EXISTS catalogs (release TEXT PRIMARY KEY, data TEXT);
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT, text_hash TEXT, dim INTEGER, vector BLOB, PRIMARY KEY (model, text_hash)
);
"""

RELEASE_TABLES = ("files", "functions", "chunks", "checks", "calls", "refs", "flags",
                   "flag_spellings", "declarations", "catalogs")

#: Insert columns of each release table, in the order rows are given.
COLUMNS: dict[str, tuple[str, ...]] = {
    "files": ("release", "path", "sha256", "lines", "parse_errors", "text", "all_refs"),
    "functions": ("release", "path", "qualname", "name", "class_name", "start_line", "end_line",
                  "decorator_start", "signature", "decorators", "docstring", "parent"),
    "chunks": ("id", "release", "path", "qualname", "kind", "start_line", "end_line", "part",
               "parts", "text_hash", "text"),
    "checks": ("id", "release", "path", "function", "kind", "exc_type", "bare", "condition",
               "message", "start_line", "end_line", "test_start", "test_end", "guards", "source"),
    "calls": ("release", "path", "callee", "caller", "caller_start", "line", "guards"),
    "refs": ("release", "path", "function", "attr", "kind", "line", "obj", "value", "guards"),
    "flags": ("release", "attr", "flags", "type", "action", "nargs", "default_json",
              "default_known", "default_src", "choices", "choices_src", "help", "required",
              "deprecated", "path", "line", "layout"),
    "flag_spellings": ("release", "spelling", "attr"),
    "declarations": ("release", "attr", "cls", "annotation", "default_json", "default_known",
                     "default_src", "help", "path", "line"),
    "catalogs": ("release", "data"),
}

#: FTS5 ``hashsize``: postings buffered in memory before a segment is written.
FTS_HASH_BYTES = 32 << 20

def fts_body(path: str, qualname: str, text: str) -> str:
    """What ``chunks_fts`` indexes for a chunk. The index is contentless, so deleting
    a row must give exactly the same body again: inserts and deletes both use this."""
    return f"{path} {qualname}\n{text}"


def fts_rows(con: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[tuple[int, str]]:
    """``(seq, body)`` of the chunk rows matching ``where``, in ``seq`` order.

    Bodies are built here and bound as values: an ``INSERT INTO chunks_fts ...
    SELECT`` would make SQLite stage every row in a temporary table first (it
    does so for any insert into a virtual table from a query), which costs a
    third more than this.
    """
    return [(seq, fts_body(path, qualname, text)) for seq, path, qualname, text in con.execute(
        f"SELECT seq, path, qualname, text FROM chunks {where} ORDER BY seq", params)]

#: Per-file tables whose rows :meth:`ReleaseWriter.copy_files` copies from another release.
COPIED = ("files", "functions", "chunks", "checks", "calls")

_IDENT_SPLIT = re.compile(r"[A-Za-z][a-z0-9]*|[A-Z]+(?![a-z])|\d+")


def fts_query(text: str) -> str:
    """A safe FTS5 MATCH expression (OR of quoted terms) from free text.

    FTS5's ``unicode61`` tokenizer already splits identifiers at ``_`` and
    ``-`` (they are not token characters), so ``speculative_eagle_topk`` in
    the source and ``--speculative-eagle-topk`` in a query meet as the same
    three tokens; camelCase is split here on the query side only.
    """
    terms: list[str] = []
    for raw in re.findall(r"[A-Za-z0-9]+", text):
        for piece in (raw.lower(), *(p.lower() for p in _IDENT_SPLIT.findall(raw))):
            if len(piece) >= 2 and piece not in terms:
                terms.append(piece)
    return " OR ".join(f'"{t}"' for t in terms[:64])


def dumps(value: Any) -> str:
    """Stable JSON for stored values (non-JSON objects become their repr)."""
    return json.dumps(value, default=repr, sort_keys=True)



def pack_text(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), 1)
