"""The light index of every release (the *atlas*): line hashes, functions and raise
messages of each file, per release, in ``<kb>/atlas.sqlite``.

The structured index (:mod:`kb.store`) holds what full ingest extracts (checks with
guards, references, the flag catalog, chunks) for the releases ingested. Release
resolution also needs to know where a traceback or a message comes from when that
release is *not* ingested; the atlas answers that for every release on the package
index, for a few megabytes each:

``releases``  one row per release: where it came from, how many files, when built
``files``     each release's manifest: package path -> content hash (``blob``)
``blobs``     per distinct file content: the CRC-32 of every stripped line
              (:func:`line_hash`, zlib'd ``uint32`` array, line 1 first) and the
              functions (name, qualified name, first and last line; zlib'd JSON)
``raises``    per distinct file content: every ``raise``/``assert`` (and exception built
              into a variable) with its lines, exception type and message source

Files shared by releases are stored once (the blob is the file's SHA-256), so the
atlas of every release since 0.4.0 stays small. It lives in its own SQLite file so
building it never touches the structured index's schema or its content hashes.
:mod:`ingest.atlas` builds it (from wheels, no tree-sitter); the engine's release
resolution reads it (:mod:`service.engine.release.elsewhere`).
"""

from __future__ import annotations

import array
import functools
import json
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ATLAS_FILE",
    "Atlas",
    "AtlasFunction",
    "AtlasRaise",
    "FileFacts",
    "line_hash",
]

#: The atlas's file name in the KB folder (beside ``index.sqlite``).
ATLAS_FILE = "atlas.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    version TEXT PRIMARY KEY, origin TEXT NOT NULL, files INTEGER NOT NULL,
    built_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    version TEXT NOT NULL, path TEXT NOT NULL, blob TEXT NOT NULL,
    PRIMARY KEY (version, path));
CREATE INDEX IF NOT EXISTS files_by_path ON files (path);
CREATE INDEX IF NOT EXISTS files_by_blob ON files (blob);
CREATE TABLE IF NOT EXISTS blobs (
    blob TEXT PRIMARY KEY, line_hashes BLOB NOT NULL, functions BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS raises (
    blob TEXT NOT NULL, line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    exc_type TEXT, message TEXT);
CREATE INDEX IF NOT EXISTS raises_by_blob ON raises (blob);
CREATE INDEX IF NOT EXISTS raises_by_message ON raises (message);
"""


def line_hash(text: str) -> int:
    """The CRC-32 of a source line's stripped text: what the atlas keeps of each line."""
    return zlib.crc32(text.strip().encode("utf-8", "replace"))


@dataclass(frozen=True)
class AtlasFunction:
    """A ``def`` of a file: its name, dotted qualified name and first and last line."""

    name: str
    qualname: str
    start: int
    end: int


@dataclass(frozen=True)
class AtlasRaise:
    """A ``raise``/``assert`` of a file (or an exception built into a variable): its
    lines, the exception type (``AssertionError`` for an assert) and the message's
    source expression (None for a bare assert or a raise without a message)."""

    line: int
    end_line: int
    exc_type: str | None
    message: str | None


@dataclass(frozen=True)
class FileFacts:
    """What the atlas keeps of one file content (``blob``, its SHA-256)."""

    blob: str
    line_hashes: tuple[int, ...]
    functions: tuple[AtlasFunction, ...]
    raises: tuple[AtlasRaise, ...]

    def line(self, n: int) -> int | None:
        """The hash of line ``n`` (1-based), None past the file's end."""
        return self.line_hashes[n - 1] if 1 <= n <= len(self.line_hashes) else None

    def enclosing(self, n: int) -> list[AtlasFunction]:
        """The functions whose lines include ``n``, innermost first."""
        return sorted((f for f in self.functions if f.start <= n <= f.end), key=lambda f: -f.start)


def _pack_lines(hashes: Iterable[int]) -> bytes:
    return zlib.compress(array.array("I", hashes).tobytes(), 6)


def _unpack_lines(data: bytes) -> tuple[int, ...]:
    arr = array.array("I")
    arr.frombytes(zlib.decompress(data))
    return tuple(arr)


class Atlas:
    """The atlas file. Writers are :meth:`add_release` and :meth:`delete_release`; the
    readers answer per path and per blob, cached by (file, blob). One connection per
    thread; WAL mode, so the server reads while a background fill writes."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        self._create = create
        self._local = threading.local()
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
            con = self._con()
            con.executescript(_SCHEMA)

    @classmethod
    def beside(cls, index_db: Path) -> Atlas | None:
        """The atlas in the folder of the structured index ``index_db``, or None when no
        atlas was built there (nothing is created)."""
        path = index_db.parent / ATLAS_FILE
        return cls(path, create=False) if path.is_file() else None

    def _con(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            uri = self.path.as_uri() + ("" if self._create else "?mode=ro")
            con = sqlite3.connect(uri, uri=True, timeout=60, check_same_thread=False)
            con.row_factory = sqlite3.Row
            if self._create:
                con.execute("PRAGMA journal_mode=WAL")
            self._local.con = con
        return con

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

    # ----------------------------------------------------------------- reading

    def releases(self) -> list[str]:
        """Every release the atlas holds (unordered: :mod:`kb.versions` orders them)."""
        return [r[0] for r in self._con().execute("SELECT version FROM releases")]

    def stamp(self) -> tuple[int, float]:
        """(releases, latest build time): changes whenever a release is added, rebuilt or
        deleted, so readers key their caches on it (one query of a table of at most a
        few hundred rows)."""
        row = self._con().execute("SELECT count(*), max(built_at) FROM releases").fetchone()
        return int(row[0]), float(row[1] or 0.0)

    def known_blobs(self) -> set[str]:
        return {r[0] for r in self._con().execute("SELECT blob FROM blobs")}

    def blobs_of(self, path: str) -> dict[str, list[str]]:
        """For ``path``: each content it has in some release -> the releases holding it."""
        out: dict[str, list[str]] = {}
        for r in self._con().execute("SELECT version, blob FROM files WHERE path = ?", (path,)):
            out.setdefault(r["blob"], []).append(r["version"])
        return out

    def facts(self, blob: str) -> FileFacts | None:
        """The line hashes, functions and raises of one file content."""
        return _facts(self, blob)

    def messages(self) -> list[tuple[str, str | None]]:
        """Every distinct (message source, exception type) of a raise in any release."""
        rows = self._con().execute(
            "SELECT DISTINCT message, exc_type FROM raises WHERE message IS NOT NULL"
        )
        return [(r[0], r[1]) for r in rows]

    def raised_at(self, message: str, exc_type: str | None) -> list[tuple[str, str, int, int]]:
        """(release, path, line, end_line) of every raise of ``message`` with ``exc_type``."""
        rows = self._con().execute(
            "SELECT f.version, f.path, r.line, r.end_line FROM raises r "
            "JOIN files f ON f.blob = r.blob WHERE r.message = ? AND r.exc_type IS ?",
            (message, exc_type),
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    # ----------------------------------------------------------------- writing

    def add_release(
        self,
        version: str,
        origin: str,
        files: Mapping[str, str],
        new: Iterable[FileFacts],
    ) -> None:
        """Store ``version``'s manifest (path -> blob) and the facts of blobs not stored
        yet, in one transaction (a release is there whole or not at all)."""
        con = self._con()
        with con:
            for f in new:
                con.execute(
                    "INSERT OR IGNORE INTO blobs (blob, line_hashes, functions) VALUES (?, ?, ?)",
                    (
                        f.blob,
                        _pack_lines(f.line_hashes),
                        zlib.compress(
                            json.dumps(
                                [[g.name, g.qualname, g.start, g.end] for g in f.functions]
                            ).encode()
                        ),
                    ),
                )
                con.executemany(
                    "INSERT INTO raises (blob, line, end_line, exc_type, message) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [(f.blob, r.line, r.end_line, r.exc_type, r.message) for r in f.raises],
                )
            con.execute("DELETE FROM files WHERE version = ?", (version,))
            con.executemany(
                "INSERT INTO files (version, path, blob) VALUES (?, ?, ?)",
                [(version, p, b) for p, b in files.items()],
            )
            con.execute(
                "INSERT OR REPLACE INTO releases (version, origin, files, built_at) "
                "VALUES (?, ?, ?, ?)",
                (version, origin, len(files), time.time()),
            )

    def delete_release(self, version: str) -> None:
        """Drop ``version`` and the blobs no other release holds."""
        con = self._con()
        with con:
            con.execute("DELETE FROM releases WHERE version = ?", (version,))
            con.execute("DELETE FROM files WHERE version = ?", (version,))
            orphan = "SELECT blob FROM blobs WHERE blob NOT IN (SELECT blob FROM files)"
            con.execute(f"DELETE FROM raises WHERE blob IN ({orphan})")
            con.execute("DELETE FROM blobs WHERE blob NOT IN (SELECT blob FROM files)")


@functools.lru_cache(maxsize=512)
def _cached_facts(path: str, blob: str, atlas: Atlas) -> FileFacts | None:
    con = atlas._con()
    row = con.execute("SELECT line_hashes, functions FROM blobs WHERE blob = ?", (blob,)).fetchone()
    if row is None:
        return None
    fns = json.loads(zlib.decompress(row["functions"]))
    raises = con.execute(
        "SELECT line, end_line, exc_type, message FROM raises WHERE blob = ? ORDER BY line",
        (blob,),
    ).fetchall()
    return FileFacts(
        blob=blob,
        line_hashes=_unpack_lines(row["line_hashes"]),
        functions=tuple(AtlasFunction(n, q, s, e) for n, q, s, e in fns),
        raises=tuple(AtlasRaise(r[0], r[1], r[2], r[3]) for r in raises),
    )


def _facts(atlas: Atlas, blob: str) -> FileFacts | None:
    # blobs are content hashes, so an entry never goes stale; keyed by file too
    return _cached_facts(str(atlas.path), blob, atlas)
