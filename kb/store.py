"""The structured index: one SQLite database (``<kb>/index.sqlite``).

Tables, all keyed by release version (see the README's "KB layout"):

``releases``   one row per ingested release: origin, content hash, counts, status
``files``      package-relative path, sha256, line count, parse errors, zlib'd text, and
               (``all_refs``) the file's unfiltered references, so that the next
               release can reuse the file's rows without parsing it again
``functions``  every def with qualname, lines, signature, decorators, docstring
``chunks``     search/embedding units tiling each file; ``chunks_fts`` (contentless FTS5,
               rowid = ``chunks.seq``) indexes ``"<path> <qualname>\n<text>"`` of each
``checks``     every assert/raise with guards (JSON), condition, message and lines
``refs``       reads/writes/declarations of argument fields, with guards
``flags``      the flag catalog; ``flag_spellings`` maps every spelling to its attribute;
               ``catalogs`` holds the whole catalog of a release as one JSON document
``embeddings`` vectors cached by (model, sha256 of the embedded text)

A release's structural rows are replaced in one transaction
(:meth:`Store.release_writer`), so an interrupted ingest leaves either the old
rows or the new ones, never a mix. The writer can copy the rows of unchanged
files from another release indexed by the same extraction code (recorded in
``meta`` as ``code:<version>``) inside SQLite, instead of re-inserting them.
Connections are per thread and the database runs in WAL mode, so many
readers (API workers) can query while an ingest writes.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kb.errors import KBError, ReleaseNotIngested

SCHEMA_VERSION = 2

_SCHEMA = """
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

_RELEASE_TABLES = ("files", "functions", "chunks", "checks", "refs", "flags",
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


def _fts_rows(con: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[tuple[int, str]]:
    """``(seq, body)`` of the chunk rows matching ``where``, in ``seq`` order.

    Bodies are built here and bound as values: an ``INSERT INTO chunks_fts ...
    SELECT`` would make SQLite stage every row in a temporary table first (it
    does so for any insert into a virtual table from a query), which costs a
    third more than this.
    """
    return [(seq, fts_body(path, qualname, text)) for seq, path, qualname, text in con.execute(
        f"SELECT seq, path, qualname, text FROM chunks {where} ORDER BY seq", params)]

#: Per-file tables whose rows :meth:`ReleaseWriter.copy_files` copies from another release.
_COPIED = ("files", "functions", "chunks", "checks")

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


class Store:
    """Thread-safe access to the structured index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._texts: dict[tuple[str, str], str | None] = {}
        self._texts_lock = threading.Lock()
        self._checkpointer: threading.Thread | None = None
        con = self.connection()
        self._migrate(con)
        con.executescript(_SCHEMA)  # idempotent DDL; executescript commits on its own
        con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),))
        if not con.execute("SELECT 1 FROM chunks_fts_config WHERE k = 'hashsize'").fetchall():
            # buffer more postings in memory per flush: fewer segments to merge in bulk loads
            con.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('hashsize', ?)",
                        (FTS_HASH_BYTES,))

    def _migrate(self, con: sqlite3.Connection) -> None:
        """Bring a schema-1 index to schema 2, keeping every release's rows.

        An index of a *newer* schema (written by a later sglang-triage) is
        refused with :class:`KBError` rather than misread.

        Schema 2 gives ``chunks`` a stable integer key (``seq``), makes
        ``chunks_fts`` contentless (keyed by ``seq``; the text lives once, in
        ``chunks``), drops the unused ``chunks_hash`` index and adds
        ``files.all_refs``. Runs once, under the write lock; a concurrent opener
        waits and finds the work done.
        """
        def version() -> int:
            has_meta = con.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchall()
            row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() \
                if has_meta else None
            return int(row[0]) if row else SCHEMA_VERSION

        found = version()
        if found > SCHEMA_VERSION:
            raise KBError(
                f"{self.path} has index schema {found}, newer than this sglang-triage's "
                f"({SCHEMA_VERSION}): upgrade sglang-triage, or ingest into another KB folder",
                details={"kb": str(self.path), "schema": found, "supported": SCHEMA_VERSION})
        if found >= 2:
            return
        with self.transaction():
            if version() >= 2:
                return
            con.execute("ALTER TABLE chunks RENAME TO chunks_v1")
            con.execute("DROP TABLE IF EXISTS chunks_fts")
            con.execute("DROP INDEX IF EXISTS chunks_hash")
            con.execute("ALTER TABLE files ADD COLUMN all_refs BLOB")
            for stmt in _SCHEMA.split(";"):
                if "chunks" in stmt and "CREATE" in stmt:
                    con.execute(stmt)
            cols = ", ".join(COLUMNS["chunks"])
            con.execute(f"INSERT INTO chunks ({cols}) SELECT {cols} FROM chunks_v1 "
                        "ORDER BY release, path, start_line")
            con.execute("DROP TABLE chunks_v1")
            con.executemany("INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)",
                            _fts_rows(con, "", ()))
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),))

    # -- connections -----------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            try:
                con = sqlite3.connect(self.path, timeout=60, check_same_thread=False,
                                      isolation_level=None)
            except sqlite3.Error as exc:
                raise KBError(f"cannot open KB index {self.path}: {exc}") from exc
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            self._local.con = con
        return con

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        con = self.connection()
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return self.connection().execute(sql, params).fetchall()

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=120)
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

    def _checkpoint_later(self) -> None:
        """Copy the write-ahead log into the database file from a background thread.

        A bulk load leaves hundreds of MB in the WAL; SQLite's automatic
        checkpoint would copy (and fsync) them inside the committing call. Run
        here instead, the copy overlaps whatever the caller does next (the
        embedding stage, say). Until it finishes readers read through the WAL,
        which is as durable as the checkpointed file.
        """
        if self._checkpointer is not None and self._checkpointer.is_alive():
            return

        def run() -> None:
            try:
                con = sqlite3.connect(self.path, timeout=60)
                try:
                    con.execute("PRAGMA wal_checkpoint(PASSIVE)")
                finally:
                    con.close()
            except sqlite3.Error:  # the KB went away (a test's temporary folder, say)
                pass

        self._checkpointer = threading.Thread(target=run, name="kb-checkpoint", daemon=True)
        self._checkpointer.start()

    # -- releases --------------------------------------------------------------------
    def release(self, version: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM releases WHERE version = ?", (version,))
        return dict(rows[0]) if rows else None

    def releases(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.query("SELECT * FROM releases ORDER BY version")]

    def require(self, version: str) -> dict[str, Any]:
        rel = self.release(version)
        if rel is None or rel["status"] not in ("indexed", "complete"):
            raise ReleaseNotIngested(
                f"release {version} is not in the KB; run: sglang-triage ingest --release {version}",
                details={"release": version, "ingested": [r["version"] for r in self.releases()]},
            )
        return rel

    def set_release_fields(self, version: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as con:
            con.execute(f"UPDATE releases SET {cols} WHERE version = ?", (*fields.values(), version))

    def replace_release(self, version: str, row: dict[str, Any], tables: dict[str, list[tuple]]) -> None:
        """Atomically replace every structural row of ``version`` (rows as in :data:`COLUMNS`)."""
        with self.release_writer(version) as writer:
            for table, rows in tables.items():
                if table != "chunks_fts":  # the keyword index is built from ``chunks``
                    writer.add(table, rows)
            writer.finish(row)

    @contextmanager
    def release_writer(self, version: str, *, code: str | None = None) -> Iterator[ReleaseWriter]:
        """One transaction that replaces ``version``'s rows: old rows go first, new rows
        are added (or copied) in batches, :meth:`ReleaseWriter.finish` writes the release
        row. Nothing is visible to readers until it commits; any error rolls back."""
        con = self.connection()
        con.execute("PRAGMA wal_autocheckpoint = 0")  # see _checkpoint_later
        try:
            with self.transaction() as con:
                self._delete(con, version)
                writer = ReleaseWriter(con, version, code)
                yield writer
                if not writer.finished:
                    raise KBError(f"release {version}: writer left without finish()")
        finally:
            con.execute("PRAGMA wal_autocheckpoint = 1000")
        self._checkpoint_later()

    def delete_release(self, version: str) -> None:
        """Remove every structural row of ``version`` (vectors live in Chroma)."""
        with self.transaction() as con:
            self._delete(con, version)

    def _delete(self, con: sqlite3.Connection, version: str) -> None:
        with self._texts_lock:
            self._texts.clear()
        con.executemany("INSERT INTO chunks_fts (chunks_fts, rowid, body) VALUES ('delete', ?, ?)",
                        _fts_rows(con, "WHERE release = ?", (version,)))
        for table in _RELEASE_TABLES:
            con.execute(f"DELETE FROM {table} WHERE release = ?", (version,))
        con.execute("DELETE FROM releases WHERE version = ?", (version,))
        con.execute("DELETE FROM meta WHERE key = ?", (f"code:{version}",))

    def reuse_base(self, version: str, code: str, shas: dict[str, str]) -> tuple[str, set[str]] | None:
        """The release (not ``version``) indexed by extraction code ``code`` that shares
        the most files with ``shas`` (path -> sha256), and those paths; None if none."""
        best: tuple[str, set[str]] | None = None
        for r in self.query("SELECT key FROM meta WHERE key LIKE 'code:%' AND value = ?", (code,)):
            other = r["key"].removeprefix("code:")
            rel = self.release(other)
            if other == version or rel is None or rel["status"] not in ("indexed", "complete"):
                continue
            same = {p for p, sha in self.query(
                "SELECT path, sha256 FROM files WHERE release = ?", (other,)) if shas.get(p) == sha}
            if same and (best is None or len(same) > len(best[1])):
                best = (other, same)
        return best

    # -- reads -----------------------------------------------------------------------
    def file_text(self, version: str, path: str) -> str | None:
        """The source of one file (kept in a small in-process cache of split lines)."""
        lines = self._lines(version, path)
        return "\n".join(lines) if lines is not None else None

    def _lines(self, version: str, path: str) -> list[str] | None:
        key = (version, path)
        with self._texts_lock:
            if key in self._texts:
                return self._texts[key]  # type: ignore[return-value]
        rows = self.query("SELECT text FROM files WHERE release = ? AND path = ?", (version, path))
        lines = zlib.decompress(rows[0]["text"]).decode("utf-8", "replace").split("\n") if rows else None
        with self._texts_lock:
            if len(self._texts) > 256:
                self._texts.clear()
            self._texts[key] = lines  # type: ignore[assignment]
        return lines

    def file_lines(self, version: str, path: str, start: int, end: int) -> list[str]:
        lines = self._lines(version, path)
        return lines[max(start - 1, 0) : end] if lines is not None else []

    def paths(self, version: str) -> list[str]:
        return [r["path"] for r in self.query("SELECT path FROM files WHERE release = ?", (version,))]

    def functions_at(self, version: str, path: str, line: int) -> list[dict[str, Any]]:
        """Functions enclosing ``line``, innermost first."""
        rows = self.query(
            "SELECT * FROM functions WHERE release = ? AND path = ? AND start_line <= ? "
            "AND end_line >= ? ORDER BY start_line DESC", (version, path, line, line))
        return [dict(r) for r in rows]

    def function(self, version: str, qualname: str, path: str | None = None) -> dict[str, Any] | None:
        sql = "SELECT * FROM functions WHERE release = ? AND qualname = ?"
        params: list[Any] = [version, qualname]
        if path:
            sql += " AND path = ?"
            params.append(path)
        rows = self.query(sql + " ORDER BY path", params)
        return dict(rows[0]) if rows else None

    def checks(self, version: str, *, path: str | None = None, function: str | None = None,
               where: str = "", params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        sql = "SELECT * FROM checks WHERE release = ?"
        args: list[Any] = [version]
        if path is not None:
            sql += " AND path = ?"
            args.append(path)
        if function is not None:
            sql += " AND function = ?"
            args.append(function)
        if where:
            sql += f" AND ({where})"
            args.extend(params)
        return [_check_row(r) for r in self.query(sql + " ORDER BY path, start_line", args)]

    def refs(self, version: str, attr: str, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM refs WHERE release = ? AND attr = ?"
        args: list[Any] = [version, attr]
        if kinds:
            sql += f" AND kind IN ({', '.join('?' * len(kinds))})"
            args.extend(kinds)
        rows = self.query(sql + " ORDER BY path, line", args)
        return [{**dict(r), "guards": json.loads(r["guards"] or "[]")} for r in rows]

    def flags(self, version: str) -> list[dict[str, Any]]:
        rows = self.query("SELECT * FROM flags WHERE release = ? ORDER BY attr", (version,))
        out = []
        for r in rows:
            d = dict(r)
            d["flags"] = json.loads(d["flags"])
            d["default"] = json.loads(d.pop("default_json"))
            d["choices"] = json.loads(d["choices"]) if d["choices"] else None
            out.append(d)
        return out

    def catalog_json(self, version: str) -> dict[str, Any]:
        rows = self.query("SELECT data FROM catalogs WHERE release = ?", (version,))
        if not rows:
            raise ReleaseNotIngested(f"release {version} has no flag catalog in the KB",
                                     details={"release": version})
        return json.loads(rows[0]["data"])

    def declarations(self, version: str, attr: str) -> list[dict[str, Any]]:
        rows = self.query("SELECT * FROM declarations WHERE release = ? AND attr = ? ORDER BY line",
                          (version, attr))
        return [{**dict(r), "default": json.loads(r["default_json"])} for r in rows]

    def chunks(self, version: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        rows = self.query(f"SELECT * FROM chunks WHERE release = ? AND id IN ({marks})",
                          (version, *ids))
        by_id = {r["id"]: dict(r) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    def fts(self, query: str, version: str, limit: int = 50) -> list[tuple[str, float]]:
        """(chunk id, bm25 score; lower is better) for a keyword query."""
        match = fts_query(query)
        if not match:
            return []
        # CROSS JOIN keeps the full-text match as the outer loop
        rows = self.query(
            "SELECT c.id AS chunk_id, bm25(chunks_fts) AS score FROM chunks_fts "
            "CROSS JOIN chunks AS c ON c.seq = chunks_fts.rowid "
            "WHERE chunks_fts MATCH ? AND c.release = ? ORDER BY score LIMIT ?",
            (match, version, limit))
        return [(r["chunk_id"], r["score"]) for r in rows]

    # -- embedding cache ---------------------------------------------------------------
    def cached_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        hashes = list(hashes)
        for i in range(0, len(hashes), 500):
            part = hashes[i : i + 500]
            marks = ", ".join("?" * len(part))
            for r in self.query(
                f"SELECT text_hash, vector FROM embeddings WHERE model = ? AND text_hash IN ({marks})",
                (model, *part)):
                out[r["text_hash"]] = r["vector"]
        return out

    def put_vectors(self, model: str, rows: Iterable[tuple[str, int, bytes]]) -> None:
        with self.transaction() as con:
            con.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)",
                            [(model, h, dim, vec) for h, dim, vec in rows])


class ReleaseWriter:
    """Adds one release's rows inside :meth:`Store.release_writer`'s transaction.

    Chunk rows are indexed for keywords as they are added (the FTS body is
    built in SQL from the stored row), so the index work overlaps whatever
    produces the next batch.
    """

    def __init__(self, con: sqlite3.Connection, version: str, code: str | None) -> None:
        self.con = con
        self.version = version
        self.code = code
        self.counts: dict[str, int] = dict.fromkeys(_RELEASE_TABLES, 0)
        self.finished = False
        self._fts_seq = self._max_seq()

    def _max_seq(self) -> int:
        return int(self.con.execute("SELECT COALESCE(MAX(seq), 0) FROM chunks").fetchone()[0])

    def _index_chunks(self) -> None:
        """Index the chunk rows added in SQL since the last call (see :meth:`copy_files`)."""
        self.con.executemany("INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)",
                             _fts_rows(self.con, "WHERE seq > ?", (self._fts_seq,)))
        self._fts_seq = self._max_seq()

    def add(self, table: str, rows: Sequence[tuple]) -> None:
        """Insert ``rows`` (tuples in :data:`COLUMNS` order; trailing columns may be left out)."""
        if not rows:
            return
        cols = COLUMNS[table][: len(rows[0])]
        if table == "chunks" and len(cols) == len(COLUMNS["chunks"]):
            self._add_chunks(rows)
            return
        self.con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) "
                             f"VALUES ({', '.join('?' * len(cols))})", rows)
        self.counts[table] += len(rows)
        if table == "chunks":
            self._index_chunks()

    def _add_chunks(self, rows: Sequence[tuple]) -> None:
        """Insert whole chunk rows under the next ``seq`` keys and index them for
        keywords from the rows in hand, without reading them back."""
        first = self._fts_seq + 1
        cols = ("seq", *COLUMNS["chunks"])
        self.con.executemany(f"INSERT INTO chunks ({', '.join(cols)}) "
                             f"VALUES ({', '.join('?' * len(cols))})",
                             [(first + i, *r) for i, r in enumerate(rows)])
        path, qualname, text = (COLUMNS["chunks"].index(c) for c in ("path", "qualname", "text"))
        self.con.executemany("INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)",
                             [(first + i, fts_body(r[path], r[qualname], r[text]))
                              for i, r in enumerate(rows)])
        self._fts_seq = first + len(rows) - 1
        self.counts["chunks"] += len(rows)

    def copy_files(self, base: str, paths: Iterable[str]) -> dict[str, list[int]]:
        """Copy the per-file rows (files, functions, chunks, checks) of ``paths`` from
        release ``base``, in SQL. Refs are not copied: the caller filters
        ``all_refs`` (see :meth:`file_refs`) for this release. Returns the copied
        files' parse errors."""
        con = self.con
        con.execute("CREATE TEMP TABLE IF NOT EXISTS reuse_paths (path TEXT PRIMARY KEY)")
        con.execute("DELETE FROM temp.reuse_paths")
        con.executemany("INSERT INTO temp.reuse_paths VALUES (?)", [(p,) for p in sorted(paths)])
        where = "WHERE release = ? AND path IN (SELECT path FROM temp.reuse_paths)"
        for table in _COPIED:
            cols = [c for c in COLUMNS[table] if c != "id" or table == "chunks"]
            picked = ", ".join("?" if c == "release" else c for c in cols)
            order = {"chunks": "seq", "checks": "id"}.get(table, "rowid")
            cur = con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} "
                              f"FROM {table} {where} ORDER BY {order}", (self.version, base))
            self.counts[table] += cur.rowcount
        self._index_chunks()
        return {r[0]: json.loads(r[1])[:20] for r in con.execute(
            f"SELECT path, parse_errors FROM files {where} AND parse_errors != '[]'",
            (self.version,))}

    def file_refs(self, paths: Iterable[str]) -> list[tuple[str, list[list[Any]]]]:
        """(path, unfiltered refs) of files already in this release that have refs."""
        wanted = set(paths)
        return [(r[0], json.loads(zlib.decompress(r[1]))) for r in self.con.execute(
            "SELECT path, all_refs FROM files WHERE release = ? AND all_refs IS NOT NULL "
            "ORDER BY path", (self.version,)) if r[0] in wanted]

    def finish(self, row: dict[str, Any]) -> None:
        """Write the release row (and the extraction code that built it)."""
        cols = ", ".join(row)
        self.con.execute(f"INSERT INTO releases ({cols}) VALUES ({', '.join('?' * len(row))})",
                         tuple(row.values()))
        if self.code:
            self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                             (f"code:{self.version}", self.code))
        self.finished = True


def _check_row(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["guards"] = json.loads(d["guards"] or "[]")
    d["bare"] = bool(d["bare"])
    return d


def pack_text(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), 1)


__all__ = ["COLUMNS", "ReleaseWriter", "Store", "fts_body", "fts_query", "pack_text"]
