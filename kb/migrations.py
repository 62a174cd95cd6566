"""Bringing an older structured index up to :data:`kb.schema.SCHEMA_VERSION`, rows kept.

Each step runs once, in its own write transaction, and re-reads the version
under the lock, so a concurrent opener waits and then finds the work done.

- **1 -> 2**: ``chunks`` gets a stable integer key (``seq``), ``chunks_fts``
  becomes contentless (keyed by ``seq``), the unused ``chunks_hash`` index
  goes and ``files.all_refs`` is added.
- **2 -> 3**: ``calls`` (call sites with their guards) is added. Schema-2
  releases have no such rows, so their content hash is cleared and the next
  ``ingest`` re-indexes them; their other rows stay readable meanwhile.
- **3 -> 4**: the per-file tables become content-addressed (see
  :mod:`kb.schema`): each distinct (path, sha256, extraction code) of the old
  ``files`` becomes one unit whose rows are taken from one release holding it,
  every release gets a manifest row per file, and the keyword index is rebuilt
  over the units. Releases keep their content hashes: the rows are the same.
- **4 -> 5**: ``unit_registrations`` and its view ``registrations`` (what registries
  each file fills, see :mod:`ingest.registries`) are added, empty; every other row
  is kept. Releases keep their content hashes: the registrations of a release
  already indexed appear when it is indexed again, and the next ``ingest`` does
  that anyway, since the extraction code that adds them changed the code
  fingerprint every content hash includes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from kb.errors import KBError
from kb.schema import (
    COLUMNS,
    REGISTRATIONS_SCHEMA,
    SCHEMA,
    SCHEMA_VERSION,
    UNIT_TABLES,
    execute_script,
    fts_rows,
)

__all__ = ["migrate"]

#: Schema 3's per-file tables (the shape steps 1-3 work on, and step 3 -> 4 reads).
_V3_TABLES = """
CREATE TABLE IF NOT EXISTS files (
    release TEXT, path TEXT, sha256 TEXT, lines INTEGER, parse_errors TEXT, text BLOB,
    all_refs BLOB, PRIMARY KEY (release, path)
);
CREATE TABLE IF NOT EXISTS functions (
    release TEXT, path TEXT, qualname TEXT, name TEXT, class_name TEXT,
    start_line INTEGER, end_line INTEGER, decorator_start INTEGER, signature TEXT,
    decorators TEXT, docstring TEXT, parent TEXT
);
CREATE TABLE IF NOT EXISTS chunks (
    seq INTEGER PRIMARY KEY, id TEXT, release TEXT, path TEXT, qualname TEXT, kind TEXT,
    start_line INTEGER, end_line INTEGER, part INTEGER, parts INTEGER, text_hash TEXT,
    text TEXT, UNIQUE (release, id)
);
CREATE TABLE IF NOT EXISTS checks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, release TEXT, path TEXT, function TEXT,
    kind TEXT, exc_type TEXT, bare INTEGER, condition TEXT, message TEXT,
    start_line INTEGER, end_line INTEGER, test_start INTEGER, test_end INTEGER,
    guards TEXT, source TEXT
);
CREATE TABLE IF NOT EXISTS calls (
    release TEXT, path TEXT, callee TEXT, caller TEXT, caller_start INTEGER, line INTEGER,
    guards TEXT
);
"""
#: Per-file tables added after schema 3, in the release-keyed shape step 3 -> 4 reads. A
#: schema-3 index has none: step 3 -> 4 creates them empty, like the tables of _V3_TABLES
#: an older index never had.
_LATER_TABLES = """
CREATE TABLE IF NOT EXISTS registrations (
    release TEXT, path TEXT, registry TEXT, keys TEXT, target TEXT, line INTEGER, kind TEXT
);
"""
_V3_INDEXES = (
    "functions_loc",
    "functions_name",
    "checks_loc",
    "checks_fn",
    "calls_callee",
    "chunks_hash",
)
_V3_ORDER = {
    "files": "rowid",
    "functions": "rowid",
    "chunks": "seq",
    "checks": "id",
    "calls": "rowid",
    "registrations": "rowid",
}


def migrate(
    con: sqlite3.Connection,
    path: Path,
    transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
) -> None:
    """Migrate the index behind ``con`` (at ``path``) to the current schema.

    An index of a *newer* schema (written by a later sglang-triage) is refused
    with :class:`KBError` rather than misread. ``transaction`` is the store's
    write-transaction context manager.
    """
    found = _version(con)
    if found > SCHEMA_VERSION:
        raise KBError(
            f"{path} has index schema {found}, newer than this sglang-triage's "
            f"({SCHEMA_VERSION}): upgrade sglang-triage, or ingest into another KB folder",
            details={"kb": str(path), "schema": found, "supported": SCHEMA_VERSION},
        )
    for target, step in ((2, _to_2), (3, _to_3), (4, _to_4), (5, _to_5)):
        if found < target:
            with transaction():
                if _version(con) < target:
                    step(con)
                    con.execute(
                        "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(target),)
                    )
    free, total = (
        con.execute(f"PRAGMA {p}").fetchone()[0] for p in ("freelist_count", "page_count")
    )
    if found < SCHEMA_VERSION and free * 4 > total:
        con.execute("VACUUM")  # the old layout's pages: a third of the file, say


def _version(con: sqlite3.Connection) -> int:
    """The index's schema (the current one for a new, empty database)."""
    if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchall():
        return SCHEMA_VERSION
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else SCHEMA_VERSION


def _to_2(con: sqlite3.Connection) -> None:
    con.execute("ALTER TABLE chunks RENAME TO chunks_v1")
    con.execute("DROP TABLE IF EXISTS chunks_fts")
    con.execute("DROP INDEX IF EXISTS chunks_hash")
    con.execute("ALTER TABLE files ADD COLUMN all_refs BLOB")
    execute_script(con, _V3_TABLES)
    cols = ", ".join(COLUMNS["chunks"])
    con.execute(
        f"INSERT INTO chunks ({cols}) SELECT {cols} FROM chunks_v1 "
        "ORDER BY release, path, start_line"
    )
    con.execute("DROP TABLE chunks_v1")


def _to_3(con: sqlite3.Connection) -> None:
    con.execute("UPDATE releases SET content_hash = NULL")
    execute_script(con, _V3_TABLES)


def _to_4(con: sqlite3.Connection) -> None:
    for table in UNIT_TABLES:  # a later layout's view holds no rows: the old table replaces it
        if con.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = ?", (table,)
        ).fetchone():
            con.execute(f"DROP VIEW {table}")
    # a table an older schema never had is simply empty
    execute_script(con, _V3_TABLES + _LATER_TABLES)
    for table in UNIT_TABLES:
        con.execute(f"ALTER TABLE {table} RENAME TO v3_{table}")
    for index in _V3_INDEXES:
        con.execute(f"DROP INDEX IF EXISTS {index}")
    con.execute("DROP TABLE IF EXISTS chunks_fts")
    execute_script(con, SCHEMA)
    # every release's files with the extraction code that indexed them
    con.execute(
        "CREATE TEMP TABLE v3_held AS SELECT f.release AS release, f.path AS path, "
        "f.sha256 AS sha256, m.value AS code FROM v3_files f "
        "LEFT JOIN meta m ON m.key = 'code:' || f.release"
    )
    con.execute(
        "CREATE TEMP TABLE v3_first AS SELECT MIN(rowid) AS held FROM v3_held "
        "GROUP BY path, sha256, code"
    )
    con.execute(
        "INSERT INTO units (path, sha256, code, lines, parse_errors, text, all_refs) "
        "SELECT f.path, f.sha256, h.code, f.lines, f.parse_errors, f.text, f.all_refs "
        "FROM v3_held h JOIN v3_files f ON f.release = h.release AND f.path = h.path "
        "WHERE h.rowid IN (SELECT held FROM v3_first) ORDER BY h.rowid"
    )
    con.execute(
        "CREATE TEMP TABLE v3_map AS SELECT h.release AS release, h.path AS path, "
        "u.id AS unit, h.rowid IN (SELECT held FROM v3_first) AS first FROM v3_held h "
        "JOIN units u ON u.path = h.path AND u.sha256 IS h.sha256 AND u.code IS h.code"
    )
    con.execute("CREATE INDEX temp.v3_map_key ON v3_map (release, path)")
    con.execute(
        "INSERT INTO release_files (release, path, unit) SELECT release, path, unit FROM v3_map"
    )
    for table in UNIT_TABLES[1:]:
        # check ids survive; a chunk's id and text are its file's lines (see kb.schema)
        dropped = ("release", "path", "id", "text") if table == "chunks" else ("release", "path")
        cols = [c for c in COLUMNS[table] if c not in dropped]
        names = ", ".join(cols)
        picked = ", ".join(f"x.{c}" for c in cols)
        con.execute(
            f"INSERT INTO unit_{table} (unit, {names}) SELECT m.unit, {picked} "
            f"FROM v3_{table} x JOIN v3_map m ON m.release = x.release "
            f"AND m.path = x.path AND m.first ORDER BY x.{_V3_ORDER[table]}"
        )
    for table in UNIT_TABLES:
        con.execute(f"DROP TABLE v3_{table}")
    for temp in ("v3_map", "v3_first", "v3_held"):
        con.execute(f"DROP TABLE temp.{temp}")
    con.executemany("INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)", fts_rows(con, "", ()))


def _to_5(con: sqlite3.Connection) -> None:
    execute_script(con, REGISTRATIONS_SCHEMA)
