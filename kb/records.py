"""Stored triages and confirmed incidents (``<kb>/records.sqlite``).

A triage is stored under a content-hash id (the same input and options give
the same id, so a retry never duplicates). Confirming a triage with the fix
that worked turns it into a recorded incident in the eval suite's format.
Records live in their own database so that re-ingesting releases never
touches them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS triages (
    id TEXT PRIMARY KEY, created TEXT, request TEXT, result TEXT
);
CREATE TABLE IF NOT EXISTS confirmations (
    id TEXT PRIMARY KEY, created TEXT, fix TEXT, note TEXT, source TEXT
);
"""


def triage_id(payload: str, options: dict[str, Any]) -> str:
    digest = hashlib.sha256(payload.encode("utf-8", "replace"))
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


class Records:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._con().executescript(_SCHEMA)

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA journal_mode=WAL")
            # as the index does: in WAL mode NORMAL never corrupts the database and spares an
            # fsync per stored triage (a power cut may lose the last few records, a crash none)
            con.execute("PRAGMA synchronous=NORMAL")
            self._local.con = con
        return con

    def save(self, tid: str, request: dict[str, Any], result: dict[str, Any] | str) -> None:
        """Store (or replace) triage ``tid``; ``result`` as a dict or already-encoded JSON."""
        encoded = result if isinstance(result, str) else json.dumps(result, default=str)
        self._con().execute(
            "INSERT OR REPLACE INTO triages VALUES (?, ?, ?, ?)",
            (tid, datetime.now(timezone.utc).isoformat(timespec="seconds"),
             json.dumps(request, default=str), encoded))

    def get(self, tid: str) -> dict[str, Any] | None:
        rows = self._con().execute("SELECT * FROM triages WHERE id = ?", (tid,)).fetchall()
        if not rows:
            return None
        row = rows[0]
        conf = self._con().execute("SELECT * FROM confirmations WHERE id = ?", (tid,)).fetchall()
        return {"id": row["id"], "created": row["created"], "request": json.loads(row["request"]),
                "result": json.loads(row["result"]),
                "confirmation": dict(conf[0]) | {"fix": json.loads(conf[0]["fix"])} if conf else None}

    def confirm(self, tid: str, fix: dict[str, Any], note: str = "", source: str = "api") -> bool:
        if self.get(tid) is None:
            return False
        self._con().execute(
            "INSERT OR REPLACE INTO confirmations VALUES (?, ?, ?, ?, ?)",
            (tid, datetime.now(timezone.utc).isoformat(timespec="seconds"), json.dumps(fix), note, source))
        return True

    def similar(self, path: str, function: str, *, exclude: str | None = None,
                limit: int = 3) -> list[dict[str, Any]]:
        """Confirmed past triages that failed in the same function, newest first, with their fixes.

        Filtered inside SQLite, over the confirmed triages only (``CROSS JOIN``
        fixes confirmations as the outer loop; otherwise the planner may scan
        every stored triage and decode its JSON).
        """
        rows = self._con().execute(
            "SELECT t.id, t.result, c.created, c.fix, c.note FROM confirmations AS c "
            "CROSS JOIN triages AS t ON t.id = c.id "  # confirmations outer: never scan triages
            "WHERE json_extract(t.result, '$.location.path') = ? "
            "AND json_extract(t.result, '$.location.function') = ? AND t.id != ? "
            "ORDER BY c.created DESC, c.rowid DESC LIMIT ?",
            (path, function, exclude or "", limit)).fetchall()
        out: list[dict[str, Any]] = []
        for row in rows:
            result = json.loads(row["result"])
            out.append({"id": row["id"], "release": (result.get("release") or {}).get("release"),
                        "summary": result.get("summary"), "confirmed_fix": json.loads(row["fix"]),
                        "note": row["note"] or "", "confirmed_at": row["created"]})
        return out

    def confirmed(self) -> list[dict[str, Any]]:
        rows = self._con().execute("SELECT id FROM confirmations ORDER BY created").fetchall()
        return [r for r in (self.get(row["id"]) for row in rows) if r is not None]
