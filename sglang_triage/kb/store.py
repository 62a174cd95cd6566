"""The structured index: one SQLite database (``<kb>/index.sqlite``).

Tables, all keyed by release version (see the README's "KB layout"):

``releases``   one row per ingested release: origin, content hash, counts, status
``files``      package-relative path, sha256, line count, parse errors, zlib'd text
``functions``  every def with qualname, lines, signature, decorators, docstring
``chunks``     search/embedding units tiling each file; ``chunks_fts`` (FTS5) beside it
``checks``     every assert/raise with guards (JSON), condition, message and lines
``refs``       reads/writes/declarations of argument fields, with guards
``flags``      the flag catalog; ``flag_spellings`` maps every spelling to its attribute;
               ``catalogs`` holds the whole catalog of a release as one JSON document
``embeddings`` vectors cached by (model, sha256 of the embedded text)

A release's structural rows are replaced in one transaction, so an
interrupted ingest leaves either the old rows or the new ones, never a mix.
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

from ..errors import KBError, ReleaseNotIngested

SCHEMA_VERSION = 1

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
    PRIMARY KEY (release, path)
);
CREATE TABLE IF NOT EXISTS functions (
    release TEXT, path TEXT, qualname TEXT, name TEXT, class_name TEXT,
    start_line INTEGER, end_line INTEGER, decorator_start INTEGER, signature TEXT,
    decorators TEXT, docstring TEXT, parent TEXT
);
CREATE INDEX IF NOT EXISTS functions_loc ON functions (release, path, start_line);
CREATE INDEX IF NOT EXISTS functions_name ON functions (release, name);
CREATE TABLE IF NOT EXISTS chunks (
    id TEXT, release TEXT, path TEXT, qualname TEXT, kind TEXT, start_line INTEGER,
    end_line INTEGER, part INTEGER, parts INTEGER, text_hash TEXT, text TEXT,
    PRIMARY KEY (release, id)
);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks (text_hash);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5 (
    release UNINDEXED, chunk_id UNINDEXED, body, tokenize = 'unicode61'
);
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

_RELEASE_TABLES = ("files", "functions", "chunks", "chunks_fts", "checks", "refs", "flags",
                   "flag_spellings", "declarations", "catalogs")

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
        con = self.connection()
        con.executescript(_SCHEMA)  # idempotent DDL; executescript commits on its own
        con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
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
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

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
        """Atomically replace every structural row of ``version``."""
        with self.transaction() as con:
            self._delete(con, version)
            for table, rows in tables.items():
                if not rows:
                    continue
                marks = ", ".join("?" * len(rows[0]))
                con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            cols = ", ".join(row)
            con.execute(f"INSERT INTO releases ({cols}) VALUES ({', '.join('?' * len(row))})",
                        tuple(row.values()))

    def delete_release(self, version: str) -> None:
        """Remove every structural row of ``version`` (vectors live in Chroma)."""
        with self.transaction() as con:
            self._delete(con, version)

    def _delete(self, con: sqlite3.Connection, version: str) -> None:
        with self._texts_lock:
            self._texts.clear()
        for table in _RELEASE_TABLES:
            con.execute(f"DELETE FROM {table} WHERE release = ?", (version,))
        con.execute("DELETE FROM releases WHERE version = ?", (version,))

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
        rows = self.query(
            "SELECT chunk_id, bm25(chunks_fts) AS score FROM chunks_fts "
            "WHERE chunks_fts MATCH ? AND release = ? ORDER BY score LIMIT ?",
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


def _check_row(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["guards"] = json.loads(d["guards"] or "[]")
    d["bare"] = bool(d["bare"])
    return d


def pack_text(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), 1)


__all__ = ["Store", "fts_query", "pack_text"]
