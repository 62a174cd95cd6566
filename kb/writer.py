"""Writing one release's rows: :class:`ReleaseWriter`, inside :meth:`kb.store.Store.release_writer`.

The index is content-addressed (see :mod:`kb.schema`): per-file rows belong to
a *unit* (path, sha256, extraction code) shared by every release holding that
file, and a release links its files to units in ``release_files``. The writer
takes rows in the release-keyed shape of :data:`~kb.schema.COLUMNS` and stores
them under their file's unit; :meth:`ReleaseWriter.link` adds files whose
unit already exists without touching their rows at all.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kb.errors import KBError
from kb.schema import COLUMNS, RELEASE_TABLES, UNIT_TABLES, chunk_id, fts_body, fts_rows

__all__ = ["ReleaseWriter", "Row", "collect_garbage"]

#: One row of a table, its values in :data:`~kb.schema.COLUMNS` order (the column types are the
#: schema's: text, integers, JSON text or compressed bytes).
Row = tuple[Any, ...]

_PER_FILE = UNIT_TABLES[1:]  # functions, chunks, checks, calls, registrations


class ReleaseWriter:
    """Adds one release's rows inside :meth:`Store.release_writer`'s transaction.

    Chunk rows are indexed for keywords as they are added, from the rows in
    hand, so the index work overlaps whatever produces the next batch.
    ``counts`` counts the release's rows, linked units' rows included.
    """

    def __init__(self, con: sqlite3.Connection, version: str, code: str | None) -> None:
        self.con = con
        self.version = version
        self.code = code
        self.counts: dict[str, int] = dict.fromkeys(RELEASE_TABLES, 0)
        self.finished = False
        self._units: dict[str, int] = {}  # path -> unit written by this writer
        self._seq = int(con.execute("SELECT COALESCE(MAX(seq), 0) FROM unit_chunks").fetchone()[0])

    # -- units ---------------------------------------------------------------------
    def _new_unit(self, path: str, file_row: Sequence[Any] | None) -> int:
        """The unit of ``path`` for this release, emptied for fresh rows.

        A unit with the same key left by an earlier ingest (a forced re-index,
        say) is reused with its rows dropped: rows of one key are the same
        whoever writes them, so releases sharing it see no difference.
        """
        sha, lines, errors, text, refs = (
            file_row[2:7] if file_row is not None else (None, None, "[]", None, None)
        )
        found = (
            self.con.execute(
                "SELECT id FROM units WHERE path = ? AND sha256 IS ? AND code IS ?",
                (path, sha, self.code),
            ).fetchone()
            if sha is not None
            else None
        )
        if found:
            unit = int(found[0])
            _drop_unit_rows(self.con, f"= {unit}")
            self.con.execute(
                "UPDATE units SET lines = ?, parse_errors = ?, text = ?, all_refs = ? WHERE id = ?",
                (lines, errors, text, refs, unit),
            )
        else:
            inserted = self.con.execute(
                "INSERT INTO units (path, sha256, code, lines, parse_errors, text, all_refs) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (path, sha, self.code, lines, errors, text, refs),
            ).lastrowid
            if inserted is None:
                raise KBError(f"release {self.version}: no unit id for {path}")
            unit = inserted
        self.con.execute(
            "INSERT OR REPLACE INTO release_files (release, path, unit) VALUES (?, ?, ?)",
            (self.version, path, unit),
        )
        self._units[path] = unit
        self.counts["files"] += 1
        return unit

    def _unit(self, path: str) -> int:
        unit = self._units.get(path)
        return unit if unit is not None else self._new_unit(path, None)

    # -- rows ------------------------------------------------------------------------
    def add(self, table: str, rows: Sequence[Row]) -> None:
        """Insert ``rows`` (tuples in :data:`COLUMNS` order; trailing columns may be left out)."""
        if not rows:
            return
        cols = COLUMNS[table][: len(rows[0])]
        if table == "files":
            for row in rows:
                self._new_unit(row[1], tuple(row) + (None,) * (7 - len(row)))
            return
        if table in _PER_FILE:
            self._add_unit_rows(table, cols, rows)
            return
        self.con.executemany(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows
        )
        self.counts[table] += len(rows)

    def _add_unit_rows(self, table: str, cols: Sequence[str], rows: Sequence[Row]) -> None:
        path = cols.index("path")
        drop = ("release", "path", "id", "text") if table == "chunks" else ("release", "path")
        keep = [i for i, c in enumerate(cols) if c not in drop]
        names = ["unit", *(cols[i] for i in keep)]
        out = [(self._unit(r[path]), *(r[i] for i in keep)) for r in rows]
        if table == "chunks":
            self._check_chunk_ids(cols, rows)
            first = self._seq + 1
            names.insert(0, "seq")
            out = [(first + i, *r) for i, r in enumerate(out)]
            qualname = cols.index("qualname")
            text = cols.index("text") if "text" in cols else -1
            self.con.executemany(
                "INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)",
                [
                    (first + i, fts_body(r[path], r[qualname], r[text] if text >= 0 else ""))
                    for i, r in enumerate(rows)
                ],
            )
            self._seq = first + len(rows) - 1
        self.con.executemany(
            f"INSERT INTO unit_{table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
            out,
        )
        self.counts[table] += len(out)

    @staticmethod
    def _check_chunk_ids(cols: Sequence[str], rows: Sequence[Row]) -> None:
        """Chunk ids are not stored but rebuilt from path, lines and kind: refuse a row
        whose id says otherwise rather than answer with another id later."""
        at = [cols.index(c) for c in ("id", "path", "start_line", "end_line", "kind")]
        for r in rows:
            if r[at[0]] != chunk_id(*(r[i] for i in at[1:])):
                raise KBError(f"chunk id {r[at[0]]!r} is not path:start-end:kind")

    def link(self, units: Mapping[str, int]) -> dict[str, list[int]]:
        """Add files whose analysis is already stored (``path -> unit``), in SQL.

        Their rows are not copied: the release's manifest points at them. Refs
        are the caller's, filtered from :meth:`file_refs` by this release's
        catalog. Returns the linked files' parse errors. Raises :class:`KBError`
        when a unit vanished since it was looked up (another process deleted
        the last release holding it): ingest again.
        """
        con = self.con
        con.execute(
            "CREATE TEMP TABLE IF NOT EXISTS link_units (path TEXT PRIMARY KEY, unit INTEGER)"
        )
        con.execute("DELETE FROM temp.link_units")
        con.executemany("INSERT INTO temp.link_units VALUES (?, ?)", sorted(units.items()))
        n = con.execute(
            "INSERT OR REPLACE INTO release_files (release, path, unit) "
            "SELECT ?, l.path, l.unit FROM temp.link_units l "
            "JOIN units u ON u.id = l.unit",
            (self.version,),
        ).rowcount
        if n != len(units):
            raise KBError(
                f"release {self.version}: {len(units) - n} stored file analyses "
                "vanished during ingest; run the ingest again"
            )
        self.counts["files"] += n
        for table in _PER_FILE:
            self.counts[table] += con.execute(
                f"SELECT COUNT(*) FROM unit_{table} WHERE unit IN "
                "(SELECT unit FROM temp.link_units)"
            ).fetchone()[0]
        return {
            r[0]: json.loads(r[1])[:20]
            for r in con.execute(
                "SELECT u.path, u.parse_errors FROM temp.link_units l JOIN units u ON u.id = l.unit "
                "WHERE u.parse_errors != '[]'"
            )
        }

    def file_refs(self, paths: Iterable[str]) -> list[tuple[str, list[list[Any]]]]:
        """(path, unfiltered refs) of files already in this release that have refs."""
        wanted = set(paths)
        return [
            (r[0], json.loads(zlib.decompress(r[1])))
            for r in self.con.execute(
                "SELECT path, all_refs FROM files WHERE release = ? AND all_refs IS NOT NULL "
                "ORDER BY path",
                (self.version,),
            )
            if r[0] in wanted
        ]

    def finish(self, row: dict[str, Any]) -> None:
        """Write the release row (and the extraction code that built it), then drop
        the units no release holds any more."""
        cols = ", ".join(row)
        self.con.execute(
            f"INSERT INTO releases ({cols}) VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
        if self.code:
            self.con.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"code:{self.version}", self.code)
            )
        collect_garbage(self.con)
        self.finished = True


def _drop_unit_rows(con: sqlite3.Connection, which: str) -> None:
    """Delete the per-file rows (and keyword entries) of the units ``id {which}``."""
    con.executemany(
        "INSERT INTO chunks_fts (chunks_fts, rowid, body) VALUES ('delete', ?, ?)",
        fts_rows(con, f"WHERE c.unit {which}", ()),
    )
    for table in _PER_FILE:
        con.execute(f"DELETE FROM unit_{table} WHERE unit {which}")


def collect_garbage(con: sqlite3.Connection) -> int:
    """Delete the units no release links to, with their rows; returns how many."""
    con.execute("CREATE TEMP TABLE IF NOT EXISTS orphan_units (id INTEGER PRIMARY KEY)")
    con.execute("DELETE FROM temp.orphan_units")
    n = con.execute(
        "INSERT INTO temp.orphan_units SELECT id FROM units WHERE NOT EXISTS "
        "(SELECT 1 FROM release_files m WHERE m.unit = units.id)"
    ).rowcount
    if n:
        _drop_unit_rows(con, "IN (SELECT id FROM temp.orphan_units)")
        con.execute("DELETE FROM units WHERE id IN (SELECT id FROM temp.orphan_units)")
    return n
