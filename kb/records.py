"""Stored triages and confirmed incidents (``<kb>/records.sqlite``).

A triage is stored under a random, unguessable id (:func:`new_triage_id`: never
derived from the content, so knowing a log does not reveal its permalink).
Confirming a triage with the fix that worked turns it into a recorded incident
in the eval suite's format. Records live in their own database so that
re-ingesting releases never touches them.

Every value read back is checked (:func:`safe_json`): a row written by an older
version, or damaged, that nests too deep or holds text that cannot be encoded
(a lone surrogate) is reported as damaged instead of breaking the request that
reads it. :meth:`Records.purge` applies the retention limits (age, count) and
never removes a confirmed triage unless told to.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from datetime import datetime, timedelta, timezone
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


#: How deep a JSON value may nest: deeper is refused on the way in and damaged when read.
MAX_DEPTH = 32
_DAMAGED = object()


def new_triage_id() -> str:
    """A random, unguessable triage id (22 URL-safe characters, 128 bits)."""
    return secrets.token_urlsafe(16)


def json_problem(value: Any) -> str | None:
    """Why a decoded JSON ``value`` may not be stored or passed on (None when it may): it
    nests deeper than :data:`MAX_DEPTH`, or holds text that cannot be encoded (a lone
    surrogate such as ``\\ud800``). The API's request guard applies the same rule to
    bodies on the way in; walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"the JSON nests deeper than {MAX_DEPTH} levels"
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "the JSON holds text that is not valid Unicode (a lone surrogate)"
        elif isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return None


def _clean(value: Any) -> bool:
    return json_problem(value) is None


def safe_json(text: str | None) -> Any:
    """``text`` decoded, or :data:`_DAMAGED` when it does not decode or is not :func:`_clean`."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _DAMAGED
    return value if _clean(value) else _DAMAGED


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
            # text that is not UTF-8 (written by something else) is read, not raised on
            con.text_factory = lambda raw: raw.decode("utf-8", "replace")
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
        """The stored triage ``tid`` with its confirmation; a damaged part is None and named
        in ``damaged`` (never an exception)."""
        rows = self._con().execute("SELECT * FROM triages WHERE id = ?", (tid,)).fetchall()
        if not rows:
            return None
        row = rows[0]
        conf = self._con().execute("SELECT * FROM confirmations WHERE id = ?", (tid,)).fetchall()
        damaged: list[str] = []

        def read(name: str, text: str | None) -> Any:
            value = safe_json(text)
            if value is _DAMAGED:
                damaged.append(name)
                return None
            return value

        out = {"id": row["id"], "created": row["created"],
               "request": read("request", row["request"]), "result": read("result", row["result"]),
               "confirmation": None}
        if conf:
            note = conf[0]["note"] or ""
            if not _clean(note):
                damaged.append("confirmation.note")
                note = ""
            out["confirmation"] = dict(conf[0]) | {"fix": read("confirmation.fix", conf[0]["fix"]),
                                                   "note": note}
        if damaged:
            out["damaged"] = damaged
        return out

    def confirm(self, tid: str, fix: dict[str, Any], note: str = "", source: str = "api") -> bool:
        if not self._con().execute("SELECT 1 FROM triages WHERE id = ?", (tid,)).fetchall():
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
            result, fix = safe_json(row["result"]), safe_json(row["fix"])
            note = row["note"] or ""
            if not isinstance(result, dict) or fix is _DAMAGED or not _clean(note):
                continue  # a damaged record is left out, never passed on
            out.append({"id": row["id"], "release": (result.get("release") or {}).get("release"),
                        "summary": result.get("summary"), "confirmed_fix": fix,
                        "note": note, "confirmed_at": row["created"]})
        return out

    def confirmed(self, *, limit: int | None = None, offset: int = 0) -> list[dict[str, Any]]:
        """Confirmed triages, oldest first (a page of them with ``limit``/``offset``)."""
        sql = "SELECT id FROM confirmations ORDER BY created, rowid"
        params: tuple[int, ...] = ()
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            params = (limit, offset)
        rows = self._con().execute(sql, params).fetchall()
        return [r for r in (self.get(row["id"]) for row in rows) if r is not None]

    def purge(self, *, max_age_days: float | None, max_count: int | None,
              keep_confirmed: bool = True, now: datetime | None = None) -> int:
        """Delete triages older than ``max_age_days`` and, oldest first, those beyond
        ``max_count``; confirmed ones (and their confirmations) stay unless
        ``keep_confirmed`` is False. Returns how many triages were deleted."""
        con = self._con()
        spare = "AND id NOT IN (SELECT id FROM confirmations)" if keep_confirmed else ""
        deleted = 0
        if max_age_days is not None:
            cutoff = ((now or datetime.now(timezone.utc)) - timedelta(days=max_age_days)
                      ).isoformat(timespec="seconds")
            deleted += con.execute(f"DELETE FROM triages WHERE created < ? {spare}",
                                   (cutoff,)).rowcount
        if max_count is not None:
            deleted += con.execute(
                f"DELETE FROM triages WHERE id IN (SELECT id FROM triages WHERE 1 {spare} "
                f"ORDER BY created DESC, rowid DESC LIMIT -1 OFFSET ?)", (max_count,)).rowcount
        if not keep_confirmed:
            con.execute("DELETE FROM confirmations WHERE id NOT IN (SELECT id FROM triages)")
        return deleted

    def count(self) -> int:
        return int(self._con().execute("SELECT COUNT(*) FROM triages").fetchone()[0])


__all__ = ["MAX_DEPTH", "Records", "json_problem", "new_triage_id", "safe_json"]
