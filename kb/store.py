"""The structured index: one SQLite database (``<kb>/index.sqlite``).

Content-addressed (since schema 4, see :mod:`kb.schema` and ``docs/kb-layout.md``): a
file's analysis is stored once per (path, sha256, extraction code) as a *unit*
shared by every release holding the file, and ``release_files`` is each
release's manifest. Readers see release-keyed tables (views over the units):

``releases``   one row per ingested release: origin, content hash, counts, status
``files``      package-relative path, sha256, line count, parse errors, zlib'd text, and
               (``all_refs``) the file's unfiltered references, so that the next
               release can reuse the file's analysis without parsing it again
``functions``  every def with qualname, lines, signature, decorators, docstring
``chunks``     search/embedding pieces tiling each file; ``chunks_fts`` (contentless FTS5,
               rowid = ``chunks.seq``, one entry per unit's chunk) indexes ``"<path> <qualname>\n<text>"`` of each
``checks``     every assert/raise with guards (JSON), condition, message and lines
``calls``      call sites with their guards (see :mod:`ingest.calls`)
``registrations`` what each file puts into a registry: registry name, keys (JSON list),
               target, line and kind (see :mod:`ingest.registries`)
``refs``       reads/writes/declarations of argument fields, with guards
``flags``      the flag catalog; ``flag_spellings`` maps every spelling to its attribute;
               ``catalogs`` holds the whole catalog of a release as one JSON document
``embeddings`` vectors cached by (model, sha256 of the embedded text)

A release's structural rows are replaced in one transaction
(:meth:`Store.release_writer`), so an interrupted ingest leaves either the old
rows or the new ones, never a mix. Files whose unit is already stored (same
path, bytes and extraction code, :meth:`Store.known_units`) are only linked;
units no release links any more are deleted when a release is replaced or
deleted.
Connections are per thread and the database runs in WAL mode, so many
readers (API workers) can query while an ingest writes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kb.code_types import Check
from kb.errors import KBError, ReleaseNotIngested
from kb.migrations import migrate
from kb.schema import (
    COLUMNS,
    FTS_HASH_BYTES,
    FUNCTION_COLUMNS,
    OWN_TABLES,
    SCHEMA,
    SCHEMA_VERSION,
    VALIDATION_PREFIXES,
    dumps,
    fts_body,
    fts_query,
    pack_text,
    register_functions,
)
from kb.versions import version_key
from kb.writer import ReleaseWriter, Row, collect_garbage


class Store:
    """Thread-safe access to the structured index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._texts: dict[tuple[str, str], list[str] | None] = {}
        self._texts_lock = threading.Lock()
        self._checkpointer: threading.Thread | None = None
        con = self.connection()
        migrate(con, path, self.transaction)
        con.executescript(SCHEMA)  # idempotent DDL; executescript commits on its own
        con.execute(
            "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        if not con.execute("SELECT 1 FROM chunks_fts_config WHERE k = 'hashsize'").fetchall():
            # buffer more postings in memory per flush: fewer segments to merge in bulk loads
            con.execute(
                "INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('hashsize', ?)",
                (FTS_HASH_BYTES,),
            )

    # -- connections -----------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            try:
                con = sqlite3.connect(
                    self.path, timeout=60, check_same_thread=False, isolation_level=None
                )
            except sqlite3.Error as exc:
                raise KBError(f"cannot open KB index {self.path}: {exc}") from exc
            con.row_factory = sqlite3.Row
            register_functions(con)
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
        """Every release row, oldest first in release order (:func:`kb.versions.version_key`:
        ``0.5.9`` before ``0.5.10``, a pre-release or dev build before its release)."""
        rows = [dict(r) for r in self.query("SELECT * FROM releases")]
        return sorted(rows, key=lambda r: version_key(r["version"]))

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
            con.execute(
                f"UPDATE releases SET {cols} WHERE version = ?", (*fields.values(), version)
            )

    def replace_release(
        self, version: str, row: dict[str, Any], tables: dict[str, list[Row]]
    ) -> None:
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
        """Remove every structural row of ``version`` (vectors live in Chroma), and the
        file analyses no other release holds."""
        with self.transaction() as con:
            self._delete(con, version)
            collect_garbage(con)

    def _delete(self, con: sqlite3.Connection, version: str) -> None:
        """Unlink ``version``'s files and drop its own rows. Units stay until
        :func:`~kb.writer.collect_garbage`, so a re-ingest can link them again."""
        with self._texts_lock:
            self._texts.clear()
        con.execute("DELETE FROM release_files WHERE release = ?", (version,))
        for table in OWN_TABLES:
            con.execute(f"DELETE FROM {table} WHERE release = ?", (version,))
        con.execute("DELETE FROM releases WHERE version = ?", (version,))
        con.execute("DELETE FROM meta WHERE key = ?", (f"code:{version}",))

    def known_units(self, code: str, shas: dict[str, str]) -> dict[str, int]:
        """``path -> unit`` for the files of ``shas`` (path -> sha256) whose analysis by
        extraction code ``code`` is already stored (by any release)."""
        out: dict[str, int] = {}
        items = sorted(shas.items())
        for i in range(0, len(items), 400):
            part = items[i : i + 400]
            marks = ", ".join("(?, ?)" for _ in part)
            rows = self.query(
                f"SELECT path, id FROM units WHERE code = ? AND (path, sha256) IN (VALUES {marks})",
                (code, *(x for pair in part for x in pair)),
            )
            out.update((r["path"], r["id"]) for r in rows)
        return out

    # -- reads -----------------------------------------------------------------------
    def file_text(self, version: str, path: str) -> str | None:
        """The source of one file (kept in a small in-process cache of split lines)."""
        lines = self._lines(version, path)
        return "\n".join(lines) if lines is not None else None

    def _lines(self, version: str, path: str) -> list[str] | None:
        key = (version, path)
        with self._texts_lock:
            if key in self._texts:
                return self._texts[key]
        rows = self.query("SELECT text FROM files WHERE release = ? AND path = ?", (version, path))
        lines = (
            zlib.decompress(rows[0]["text"]).decode("utf-8", "replace").split("\n")
            if rows
            else None
        )
        with self._texts_lock:
            if len(self._texts) > 256:
                self._texts.clear()
            self._texts[key] = lines
        return lines

    def file_lines(self, version: str, path: str, start: int, end: int) -> list[str]:
        lines = self._lines(version, path)
        return lines[max(start - 1, 0) : end] if lines is not None else []

    def paths(self, version: str) -> list[str]:
        return [
            r["path"] for r in self.query("SELECT path FROM files WHERE release = ?", (version,))
        ]

    def functions_at(self, version: str, path: str, line: int) -> list[dict[str, Any]]:
        """Functions enclosing ``line``, innermost first."""
        rows = self.query(
            "SELECT * FROM functions WHERE release = ? AND path = ? AND start_line <= ? "
            "AND end_line >= ? ORDER BY start_line DESC",
            (version, path, line, line),
        )
        return [dict(r) for r in rows]

    def function(
        self, version: str, qualname: str, path: str | None = None
    ) -> dict[str, Any] | None:
        rows = self.functions_named(version, qualname=qualname)
        rows = [r for r in rows if r["path"] == path] if path else rows
        return rows[0] if rows else None

    def functions_named(
        self, version: str, name: str | None = None, *, qualname: str | None = None
    ) -> list[dict[str, Any]]:
        """The functions of ``version`` called ``name`` (or with this ``qualname``), ordered
        by path, as rows of the ``functions`` view. Looked up through the name index first,
        then the release's files (the view's own plan scans every file of the release)."""
        column, value = ("qualname", qualname) if qualname is not None else ("name", name)
        rows = self.query(
            f"SELECT {FUNCTION_COLUMNS} FROM unit_functions f CROSS JOIN release_files m "
            f"ON m.unit = f.unit AND m.release = ? WHERE f.{column} = ? ORDER BY m.path",
            (version, value),
        )
        return [dict(r) for r in rows]

    def checks(
        self,
        version: str,
        *,
        path: str | None = None,
        function: str | None = None,
        where: str = "",
        params: Iterable[Any] = (),
    ) -> list[Check]:
        """``version``'s checks (see :class:`~kb.code_types.Check`) in path and line order,
        of ``path`` and ``function`` when given, and where the SQL ``where`` holds."""
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

    def calls(
        self, version: str, path: str | None, callee: str | None = None
    ) -> list[dict[str, Any]]:
        """Call sites in ``path`` (every file's, by path, when None; of ``callee`` when
        given), in source order, guards decoded.

        Rows are what ingest stored: each call whose callee is a function of the same
        file, and in the validation files every named call (see :mod:`ingest.calls`)."""
        sql = "SELECT * FROM calls WHERE release = ?"
        params: tuple[Any, ...] = (version,)
        if path is not None:
            sql += " AND path = ?"
            params += (path,)
        if callee is not None:
            sql += " AND callee = ?"
            params += (callee,)
        rows = self.query(sql + " ORDER BY path, seq", params)
        return [dict(r) | {"guards": json.loads(r["guards"] or "[]")} for r in rows]

    def registrations(
        self, version: str, *, registry: str | None = None, key: str | None = None
    ) -> list[dict[str, Any]]:
        """What ``version`` registers (see :mod:`ingest.registries`), in path and line order:
        rows ``{"registry", "keys", "target", "path", "line", "kind"}``, ``keys`` a list.

        ``registry`` keeps the rows of that registry (``register_fused_func``,
        ``QUANTIZATION_METHODS``); ``key`` those whose keys hold ``key``, compared
        without regard to case (a crash names ``MoeRunnerBackend.FLASHINFER_TRTLLM``
        where the source registers ``"flashinfer_trtllm"``). A release indexed before
        schema 5 has no rows until it is indexed again."""
        sql = "SELECT registry, keys, target, path, line, kind FROM registrations WHERE release = ?"
        args: list[Any] = [version]
        if registry is not None:
            sql += " AND registry = ?"
            args.append(registry)
        if key is not None:
            sql += (
                " AND EXISTS (SELECT 1 FROM json_each(registrations.keys) k WHERE k.value = ? "
                "COLLATE NOCASE)"
            )
            args.append(key)
        rows = self.query(sql + " ORDER BY path, line, seq", args)
        return [{**dict(r), "keys": json.loads(r["keys"] or "[]")} for r in rows]

    def refs(
        self, version: str, attr: str, kinds: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
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
            raise ReleaseNotIngested(
                f"release {version} has no flag catalog in the KB", details={"release": version}
            )
        data: dict[str, Any] = json.loads(rows[0]["data"])
        return data

    def declarations(self, version: str, attr: str) -> list[dict[str, Any]]:
        rows = self.query(
            "SELECT * FROM declarations WHERE release = ? AND attr = ? ORDER BY line",
            (version, attr),
        )
        return [{**dict(r), "default": json.loads(r["default_json"])} for r in rows]

    def chunks(self, version: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Chunk rows by id, in the order of ``ids`` (unknown ids are left out).

        An id is ``path:start-end:kind`` (built by the ``chunks`` view, not stored),
        so rows are looked up by path and first line, which are indexed."""
        keys = sorted(
            {
                (i.rsplit(":", 2)[0], int(i.rsplit(":", 2)[1].split("-")[0]))
                for i in ids
                if _is_chunk_id(i)
            }
        )
        if not keys:
            return []
        marks = ", ".join("(?, ?)" for _ in keys)
        rows = self.query(
            f"SELECT * FROM chunks WHERE release = ? AND (path, start_line) IN (VALUES {marks})",
            (version, *(x for k in keys for x in k)),
        )
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
            (match, version, limit),
        )
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
                (model, *part),
            ):
                out[r["text_hash"]] = r["vector"]
        return out

    def put_vectors(self, model: str, rows: Iterable[tuple[str, int, bytes]]) -> None:
        with self.transaction() as con:
            con.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)",
                [(model, h, dim, vec) for h, dim, vec in rows],
            )


def _is_chunk_id(text: str) -> bool:
    parts = text.rsplit(":", 2)
    if len(parts) != 3:
        return False
    span = parts[1].split("-")
    return len(span) == 2 and all(p.isdigit() for p in span)


def _check_row(row: sqlite3.Row) -> Check:
    return Check.from_row(dict(row))


__all__ = [
    "COLUMNS",
    "SCHEMA_VERSION",
    "VALIDATION_PREFIXES",
    "ReleaseWriter",
    "Store",
    "dumps",
    "fts_body",
    "fts_query",
    "pack_text",
]
