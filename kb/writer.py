"""Writing one release's rows: :class:`ReleaseWriter`, inside :meth:`kb.store.Store.release_writer`."""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from kb.schema import COLUMNS, COPIED, RELEASE_TABLES, fts_body, fts_rows

__all__ = ["ReleaseWriter"]


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
        self.counts: dict[str, int] = dict.fromkeys(RELEASE_TABLES, 0)
        self.finished = False
        self._fts_seq = self._max_seq()

    def _max_seq(self) -> int:
        return int(self.con.execute("SELECT COALESCE(MAX(seq), 0) FROM chunks").fetchone()[0])

    def _index_chunks(self) -> None:
        """Index the chunk rows added in SQL since the last call (see :meth:`copy_files`)."""
        self.con.executemany("INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)",
                             fts_rows(self.con, "WHERE seq > ?", (self._fts_seq,)))
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
        for table in COPIED:
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
