"""The disk budget of on-demand ingest: what the KB and the caches hold, and what may go.

Releases ingested on demand are remembered in the KB's ``meta`` table
(``ondemand:<version>`` -> the time it landed), so any process of the KB knows
which releases it may evict: never one ``ingest`` was asked for by hand and never a
default release (``TRIAGE_RELEASES``, what ``ingest --defaults`` indexes).

:func:`disk_usage` adds up the KB folder (less the free pages inside its SQLite
file: deleting a release frees pages that the next ingest reuses, the file does not
shrink; and less its write-ahead log), the wheel cache and the unpacked sources.
:func:`make_room` evicts on-demand releases, least recently used first, until the usage is under the quota, and says
what it evicted; :func:`evict` removes one release: its manifest and its own rows
(file analyses shared with other releases stay: the store is content-addressed), its
vectors, its wheel and its unpacked source.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kb.knowledge import KnowledgeBase
from kb.settings import KBSettings

__all__ = [
    "LEDGER_PREFIX",
    "Room",
    "disk_usage",
    "evict",
    "make_room",
    "one_ingest_at_a_time",
    "on_demand_releases",
    "record_on_demand",
]

log = logging.getLogger(__name__)

#: ``meta`` key prefix of a release ingested on demand.
LEDGER_PREFIX = "ondemand:"


@contextmanager
def one_ingest_at_a_time(kb: KnowledgeBase) -> Iterator[None]:
    """Hold the KB's on-demand ingest lock (``<kb>/.ondemand.lock``, ``flock``): the API
    processes of one KB (``serve --workers N``) make room and ingest one after another."""
    path = kb.root / ".ondemand.lock"
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def record_on_demand(kb: KnowledgeBase, version: str, when: float | None = None) -> None:
    """Remember that ``version`` was ingested on demand (it may be evicted later)."""
    with kb.store.transaction() as con:
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            (LEDGER_PREFIX + version, json.dumps({"landed": when or time.time()})),
        )


def on_demand_releases(kb: KnowledgeBase) -> dict[str, float]:
    """version -> when it landed, for every release in the KB that was ingested on demand."""
    rows = kb.store.query("SELECT key, value FROM meta WHERE key LIKE ?", (LEDGER_PREFIX + "%",))
    held = {r["version"] for r in kb.store.releases()}
    out: dict[str, float] = {}
    for row in rows:
        version = row["key"][len(LEDGER_PREFIX) :]
        if version not in held:
            continue
        try:
            out[version] = float(json.loads(row["value"])["landed"])
        except (ValueError, KeyError, TypeError):
            out[version] = 0.0
    return out


def _tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed), leaving out
    SQLite's write-ahead logs: they are copied into the database and reused, and a
    deletion first grows them."""
    total = 0
    stack = [path]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(
                            ("-wal", "-shm")
                        ):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def _free_pages(db: Path) -> int:
    """Bytes of the free pages inside the SQLite file ``db`` (0 when it cannot be read)."""
    if not db.is_file():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            free = con.execute("PRAGMA freelist_count").fetchone()[0]
            size = con.execute("PRAGMA page_size").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0
    return int(free) * int(size)


def disk_usage(settings: KBSettings) -> int:
    """Bytes the KB folder, the wheel cache and the unpacked sources hold (see the module)."""
    kb_bytes = _tree_bytes(settings.kb_path) - _free_pages(settings.kb_path / "index.sqlite")
    return max(0, kb_bytes) + _tree_bytes(settings.wheel_dir) + _tree_bytes(settings.source_dir)


def _source_folders(settings: KBSettings, version: str, origin: str | None) -> list[Path]:
    """The unpacked source of ``version``: ``sources/<version>`` or a dev build's ``git-<sha>``."""
    found = [settings.source_dir / version]
    if origin and origin.startswith("git:") and "@" in origin:
        found.append(settings.source_dir / f"git-{origin.rsplit('@', 1)[1]}")
    return [
        p for p in found if p.is_dir() and p.resolve().is_relative_to(settings.source_dir.resolve())
    ]


def evict(kb: KnowledgeBase, settings: KBSettings, version: str) -> None:
    """Remove release ``version``: its rows (shared file analyses stay), vectors, wheel and
    unpacked source, and its on-demand mark."""
    rel = kb.store.release(version)
    origin = rel.get("origin") if rel else None
    if rel is not None and (rel.get("embedded_scope") or "none") != "none":
        try:
            kb.vectors.delete_release(version)
        except Exception:  # Chroma down: its vectors are orphans the next ingest reconciles
            log.warning("could not delete the vectors of %s", version, exc_info=True)
    kb.store.delete_release(version)
    with kb.store.transaction() as con:
        con.execute("DELETE FROM meta WHERE key = ?", (LEDGER_PREFIX + version,))
    for folder in _source_folders(settings, version, origin):
        shutil.rmtree(folder, ignore_errors=True)
    if settings.wheel_dir.is_dir():
        for wheel in settings.wheel_dir.glob(f"sglang-{version}-*.whl"):
            wheel.unlink(missing_ok=True)


@dataclass
class Room:
    """What :func:`make_room` found and did."""

    quota: int
    before: int
    after: int
    evicted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.after < self.quota


def make_room(
    kb: KnowledgeBase,
    settings: KBSettings,
    quota: int,
    *,
    keep: Iterable[str] = (),
    last_used: Mapping[str, float] | None = None,
) -> Room:
    """Evict on-demand releases until the usage is under ``quota`` bytes.

    Least recently used first (``last_used``: version -> time it last answered, else the
    time it landed); never a default release (``settings.releases``) nor one in ``keep``,
    and never a release that was not ingested on demand.
    """
    usage = disk_usage(settings)
    room = Room(quota, usage, usage)
    if usage < quota:
        return room
    protected = set(settings.releases) | set(keep)
    used = dict(last_used or {})
    candidates = sorted(
        (
            (max(landed, used.get(v, 0.0)), v)
            for v, landed in on_demand_releases(kb).items()
            if v not in protected
        )
    )
    for _, version in candidates:
        evict(kb, settings, version)
        room.evicted.append(version)
        room.after = disk_usage(settings)
        log.info(
            "disk quota: evicted on-demand release %s (%d bytes in use of %d)",
            version,
            room.after,
            quota,
        )
        if room.ok:
            break
    return room
