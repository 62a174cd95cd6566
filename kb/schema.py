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

__all__ = [
    "COLUMNS",
    "FTS_HASH_BYTES",
    "FUNCTION_COLUMNS",
    "OWN_TABLES",
    "REGISTRATIONS_SCHEMA",
    "RELEASE_TABLES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "UNIT_TABLES",
    "VALIDATION_PREFIXES",
    "dumps",
    "execute_script",
    "fts_body",
    "fts_query",
    "chunk_id",
    "fts_rows",
    "pack_text",
    "register_functions",
]

SCHEMA_VERSION = 5

#: The files where SGLang validates its launch flags: ``ServerArgs`` and its
#: ``_handle_*`` methods up to 0.5.18, the resolution hooks from 0.5.19.
VALIDATION_PREFIXES: tuple[str, ...] = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")

#: Schema 4 is content-addressed. A file's analysis is a *unit*, stored once per
#: (path, sha256 of its bytes, extraction code) and shared by every release that
#: holds that file; a release is a manifest (``release_files``: path -> unit) plus
#: what is truly its own (refs filtered by its catalog, flags, declarations, its
#: catalog). The release-keyed names of schema 3 (``files``, ``functions``,
#: ``chunks``, ``checks``, ``calls``) are views over manifest and units, so readers
#: query ``WHERE release = ?`` as before. Schema 5 adds the per-file
#: ``unit_registrations`` (:data:`REGISTRATIONS_SCHEMA`).

#: What registries a file fills (``ingest.registries``): one row per registration, its keys a
#: JSON list of strings; ``registrations`` is its release-keyed view. Added by schema 5.
REGISTRATIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS unit_registrations (
    seq INTEGER PRIMARY KEY, unit INTEGER, registry TEXT, keys TEXT, target TEXT,
    line INTEGER, kind TEXT
);
CREATE INDEX IF NOT EXISTS unit_registrations_loc ON unit_registrations (unit, line);
CREATE INDEX IF NOT EXISTS unit_registrations_registry ON unit_registrations (registry);
CREATE VIEW IF NOT EXISTS registrations AS
    SELECT r.seq AS seq, m.release AS release, m.path AS path, r.registry AS registry,
           r.keys AS keys, r.target AS target, r.line AS line, r.kind AS kind
    FROM release_files m JOIN unit_registrations r ON r.unit = m.unit;
"""

#: the ``functions`` view's columns over ``release_files m`` and ``unit_functions f`` (also
#: selected by :meth:`kb.store.Store.functions_named`, which joins the two its own way)
FUNCTION_COLUMNS = (
    "m.release AS release, m.path AS path, f.qualname AS qualname, f.name AS name, "
    "f.class_name AS class_name, f.start_line AS start_line, f.end_line AS end_line, "
    "f.decorator_start AS decorator_start, f.signature AS signature, "
    "f.decorators AS decorators, f.docstring AS docstring, f.parent AS parent"
)

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS releases (
    version TEXT PRIMARY KEY, origin TEXT, content_hash TEXT, status TEXT,
    files INTEGER, functions INTEGER, chunks INTEGER, checks INTEGER, refs INTEGER,
    flags INTEGER, parse_errors INTEGER, embedded_scope TEXT, ingested_at TEXT,
    timings TEXT
);
CREATE TABLE IF NOT EXISTS units (
    id INTEGER PRIMARY KEY, path TEXT, sha256 TEXT, code TEXT, lines INTEGER,
    parse_errors TEXT, text BLOB, all_refs BLOB
);
CREATE UNIQUE INDEX IF NOT EXISTS units_key ON units (path, sha256, code);
CREATE TABLE IF NOT EXISTS release_files (
    release TEXT, path TEXT, unit INTEGER, PRIMARY KEY (release, path)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS release_files_unit ON release_files (unit, release);
CREATE TABLE IF NOT EXISTS unit_functions (
    unit INTEGER, qualname TEXT, name TEXT, class_name TEXT,
    start_line INTEGER, end_line INTEGER, decorator_start INTEGER, signature TEXT,
    decorators TEXT, docstring TEXT, parent TEXT
);
CREATE INDEX IF NOT EXISTS unit_functions_loc ON unit_functions (unit, start_line);
CREATE INDEX IF NOT EXISTS unit_functions_name ON unit_functions (name);
CREATE INDEX IF NOT EXISTS unit_functions_qualname ON unit_functions (qualname);
CREATE TABLE IF NOT EXISTS unit_chunks (
    seq INTEGER PRIMARY KEY, unit INTEGER, qualname TEXT, kind TEXT,
    start_line INTEGER, end_line INTEGER, part INTEGER, parts INTEGER, text_hash TEXT
);
CREATE INDEX IF NOT EXISTS unit_chunks_loc ON unit_chunks (unit, start_line);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5 (
    body, content = '', tokenize = 'unicode61'
);
CREATE TABLE IF NOT EXISTS unit_checks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, unit INTEGER, function TEXT,
    kind TEXT, exc_type TEXT, bare INTEGER, condition TEXT, message TEXT,
    start_line INTEGER, end_line INTEGER, test_start INTEGER, test_end INTEGER,
    guards TEXT, source TEXT
);
CREATE INDEX IF NOT EXISTS unit_checks_loc ON unit_checks (unit, start_line);
CREATE INDEX IF NOT EXISTS unit_checks_fn ON unit_checks (function);
CREATE TABLE IF NOT EXISTS unit_calls (
    seq INTEGER PRIMARY KEY, unit INTEGER, callee TEXT, caller TEXT, caller_start INTEGER,
    line INTEGER, guards TEXT
);
CREATE INDEX IF NOT EXISTS unit_calls_callee ON unit_calls (unit, callee);
CREATE VIEW IF NOT EXISTS files AS
    SELECT m.release AS release, m.path AS path, u.sha256 AS sha256, u.lines AS lines,
           u.parse_errors AS parse_errors, u.text AS text, u.all_refs AS all_refs
    FROM release_files m JOIN units u ON u.id = m.unit;
CREATE VIEW IF NOT EXISTS functions AS
    SELECT """
    + FUNCTION_COLUMNS
    + """
    FROM release_files m JOIN unit_functions f ON f.unit = m.unit;
CREATE VIEW IF NOT EXISTS chunks AS
    SELECT c.seq AS seq,
           m.path || ':' || c.start_line || '-' || c.end_line || ':' || c.kind AS id,
           m.release AS release, m.path AS path,
           c.qualname AS qualname, c.kind AS kind, c.start_line AS start_line,
           c.end_line AS end_line, c.part AS part, c.parts AS parts,
           c.text_hash AS text_hash,
           (SELECT unit_lines(u.id, u.text, c.start_line, c.end_line) FROM units u
            WHERE u.id = c.unit) AS text
    FROM release_files m JOIN unit_chunks c ON c.unit = m.unit;
CREATE VIEW IF NOT EXISTS checks AS
    SELECT c.id AS id, m.release AS release, m.path AS path, c.function AS function,
           c.kind AS kind, c.exc_type AS exc_type, c.bare AS bare, c.condition AS condition,
           c.message AS message, c.start_line AS start_line, c.end_line AS end_line,
           c.test_start AS test_start, c.test_end AS test_end, c.guards AS guards,
           c.source AS source
    FROM release_files m JOIN unit_checks c ON c.unit = m.unit;
CREATE VIEW IF NOT EXISTS calls AS
    SELECT c.seq AS seq, m.release AS release, m.path AS path, c.callee AS callee,
           c.caller AS caller, c.caller_start AS caller_start, c.line AS line,
           c.guards AS guards
    FROM release_files m JOIN unit_calls c ON c.unit = m.unit;
"""
    + REGISTRATIONS_SCHEMA
    + """
CREATE TABLE IF NOT EXISTS refs (
    release TEXT, path TEXT, function TEXT, attr TEXT, kind TEXT, line INTEGER,
    obj TEXT, value TEXT, guards TEXT
);
CREATE INDEX IF NOT EXISTS refs_attr ON refs (release, attr);
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
)

#: A chunk is a span of its file's lines, so neither its id (``path:start-end:kind``) nor
#: its text is stored: the ``chunks`` view builds both, the text with the SQL function
#: ``unit_lines`` over the unit's packed file text, which :func:`register_functions` adds
#: to a connection (:class:`kb.store.Store` does so for each of its own).

#: Per-file tables: release-keyed views over the ``unit_*`` tables of that name.
UNIT_TABLES = ("files", "functions", "chunks", "checks", "calls", "registrations")
#: Tables of a release's own rows (deleted with it).
OWN_TABLES = ("refs", "flags", "flag_spellings", "declarations", "catalogs")
RELEASE_TABLES = UNIT_TABLES + OWN_TABLES

#: Columns of each release-keyed table (the views included), in the order
#: :meth:`ReleaseWriter.add` takes rows; the writer turns ``release, path`` of a
#: per-file row into its unit.
COLUMNS: dict[str, tuple[str, ...]] = {
    "files": ("release", "path", "sha256", "lines", "parse_errors", "text", "all_refs"),
    "functions": (
        "release",
        "path",
        "qualname",
        "name",
        "class_name",
        "start_line",
        "end_line",
        "decorator_start",
        "signature",
        "decorators",
        "docstring",
        "parent",
    ),
    "chunks": (
        "id",
        "release",
        "path",
        "qualname",
        "kind",
        "start_line",
        "end_line",
        "part",
        "parts",
        "text_hash",
        "text",
    ),
    "checks": (
        "id",
        "release",
        "path",
        "function",
        "kind",
        "exc_type",
        "bare",
        "condition",
        "message",
        "start_line",
        "end_line",
        "test_start",
        "test_end",
        "guards",
        "source",
    ),
    "calls": ("release", "path", "callee", "caller", "caller_start", "line", "guards"),
    "registrations": ("release", "path", "registry", "keys", "target", "line", "kind"),
    "refs": ("release", "path", "function", "attr", "kind", "line", "obj", "value", "guards"),
    "flags": (
        "release",
        "attr",
        "flags",
        "type",
        "action",
        "nargs",
        "default_json",
        "default_known",
        "default_src",
        "choices",
        "choices_src",
        "help",
        "required",
        "deprecated",
        "path",
        "line",
        "layout",
    ),
    "flag_spellings": ("release", "spelling", "attr"),
    "declarations": (
        "release",
        "attr",
        "cls",
        "annotation",
        "default_json",
        "default_known",
        "default_src",
        "help",
        "path",
        "line",
    ),
    "catalogs": ("release", "data"),
}

#: FTS5 ``hashsize``: postings buffered in memory before a segment is written.
FTS_HASH_BYTES = 32 << 20


def fts_body(path: str, qualname: str, text: str) -> str:
    """What ``chunks_fts`` indexes for a chunk. The index is contentless, so deleting
    a row must give exactly the same body again: inserts and deletes both use this."""
    return f"{path} {qualname}\n{text}"


def fts_rows(con: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[tuple[int, str]]:
    """``(seq, body)`` of the unit chunk rows matching ``where`` (over ``unit_chunks c``
    joined to ``units u``), in ``seq`` order.

    Bodies are built here and bound as values: an ``INSERT INTO chunks_fts ...
    SELECT`` would make SQLite stage every row in a temporary table first (it
    does so for any insert into a virtual table from a query), which costs a
    third more than this.
    """
    return [
        (seq, fts_body(path, qualname, text))
        for seq, path, qualname, text in con.execute(
            f"SELECT c.seq, u.path, c.qualname, unit_lines(u.id, u.text, c.start_line, c.end_line) "
            f"FROM unit_chunks c JOIN units u "
            f"ON u.id = c.unit {where} ORDER BY c.seq",
            params,
        )
    ]


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


def execute_script(con: sqlite3.Connection, script: str) -> None:
    """Run ``script`` statement by statement inside the caller's transaction
    (``executescript`` would commit first)."""
    stmt = ""
    for line in script.splitlines(keepends=True):
        stmt += line
        if sqlite3.complete_statement(stmt):
            con.execute(stmt)
            stmt = ""


def pack_text(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), 1)


def chunk_id(path: str, start: int, end: int, kind: str) -> str:
    """A chunk's id, as the ``chunks`` view builds it (and :class:`ingest.chunker.Chunk` names it)."""
    return f"{path}:{start}-{end}:{kind}"


class _UnitLines:
    """``unit_lines(unit, packed_text, start, end)``: lines ``start..end`` of a unit's file.

    Rows of one unit come together, so the split lines of the last few units are
    kept: a file is unpacked once per query, not once per chunk.
    """

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self.lines: dict[int, list[str]] = {}

    def __call__(self, unit: int, packed: bytes | None, start: int, end: int) -> str | None:
        lines = self.lines.get(unit)
        if lines is None:
            if packed is None:
                return None
            lines = zlib.decompress(packed).decode("utf-8", "replace").split("\n")
            if len(self.lines) >= self.keep:
                self.lines.pop(next(iter(self.lines)))
            self.lines[unit] = lines
        return "\n".join(lines[max(start - 1, 0) : end])


def register_functions(con: sqlite3.Connection) -> None:
    """Add the SQL function the ``chunks`` view uses (``unit_lines``) to ``con``."""
    con.create_function("unit_lines", 4, _UnitLines(), deterministic=True)
