"""Stored triages and confirmed incidents (``<kb>/records.sqlite``, or a server's database).

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

The store is SQLAlchemy Core over a URL (:mod:`kb.records_db`): by default the
SQLite file ``<kb>/records.sqlite``, or ``TRIAGE_DATABASE_URL``
(``postgresql://…``) for a team, so that several API processes, the Slack bot and
the replay workers share one set of records. The schema is migrated by Alembic
when a store is opened. This module imports SQLAlchemy only when a
:class:`Records` is built: the JSON checks are importable without it.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def location_of(result: dict[str, Any] | str) -> tuple[str | None, str | None]:
    """``(path, function)`` of a result's location (dict or encoded JSON), else Nones."""
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except (ValueError, RecursionError):
            return None, None
    loc = result.get("location") if isinstance(result, dict) else None
    if not isinstance(loc, dict):
        return None, None
    path, function = loc.get("path"), loc.get("function")
    return (path if isinstance(path, str) else None,
            function if isinstance(function, str) else None)


class Records:
    """Stored triages and their confirmations, in the database at ``where``.

    ``where`` is the SQLite file's path (a :class:`~pathlib.Path`, the embedded default) or
    a database URL (``sqlite:///…``, ``postgresql://…``). Safe to share between threads.
    """

    def __init__(self, where: Path | str) -> None:
        from kb import records_db as db

        self._db = db
        if isinstance(where, Path):
            self.path: Path | None = where
            self.url = db.sqlite_url(where)
        else:
            self.url = db.normalize_url(where)
            name = db.sa.engine.make_url(self.url).database if self.url.startswith("sqlite") \
                else None
            self.path = Path(name) if name else None
        self.engine: Engine = db.open_engine(self.url)
        self._sqlite = db.is_sqlite(self.engine)

    def revision(self) -> str | None:
        """The schema's revision (the ``alembic_version`` table)."""
        return self._db.revision(self.engine)

    def _text(self, value: str) -> str:
        """PostgreSQL's text refuses NUL characters; SQLite stores them as given."""
        return value if self._sqlite else value.replace("\x00", "")

    def save(self, tid: str, request: dict[str, Any], result: dict[str, Any] | str) -> None:
        """Store (or replace) triage ``tid``; ``result`` as a dict or already-encoded JSON."""
        encoded = result if isinstance(result, str) else json.dumps(result, default=str)
        path, function = location_of(result)
        with self.engine.begin() as conn:
            self._db.upsert(conn, self._db.triages, {
                "id": tid, "created": _now(), "request": json.dumps(request, default=str),
                "result": self._text(encoded), "loc_path": path, "loc_function": function})

    def get(self, tid: str) -> dict[str, Any] | None:
        """The stored triage ``tid`` with its confirmation; a damaged part is None and named
        in ``damaged`` (never an exception)."""
        t, c = self._db.triages, self._db.confirmations
        with self.engine.connect() as conn:
            row = conn.execute(self._db.sa.select(t.c.id, t.c.created, t.c.request, t.c.result)
                               .where(t.c.id == tid)).mappings().first()
            if row is None:
                return None
            conf = conn.execute(self._db.sa.select(c.c.id, c.c.created, c.c.fix, c.c.note,
                                                   c.c.source).where(c.c.id == tid)
                                ).mappings().first()
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
        if conf is not None:
            note = conf["note"] or ""
            if not _clean(note):
                damaged.append("confirmation.note")
                note = ""
            out["confirmation"] = dict(conf) | {"fix": read("confirmation.fix", conf["fix"]),
                                                "note": note}
        if damaged:
            out["damaged"] = damaged
        return out

    def confirm(self, tid: str, fix: dict[str, Any], note: str = "", source: str = "api") -> bool:
        """Record that ``fix`` resolved triage ``tid`` (False when it is not stored)."""
        t = self._db.triages
        with self.engine.begin() as conn:
            if conn.execute(self._db.sa.select(t.c.id).where(t.c.id == tid)).first() is None:
                return False
            self._db.upsert(conn, self._db.confirmations, {
                "id": tid, "created": _now(), "fix": json.dumps(fix), "note": self._text(note),
                "source": source})
        return True

    def similar(self, path: str, function: str, *, exclude: str | None = None,
                limit: int = 3) -> list[dict[str, Any]]:
        """Confirmed past triages that failed in the same function, newest first, with their fixes.

        Filtered by the indexed location columns (copied from the result when it is
        saved), over the confirmed triages only: an unconfirmed record is never decoded.
        """
        sa, t, c = self._db.sa, self._db.triages, self._db.confirmations
        query = (sa.select(t.c.id, t.c.result, c.c.created, c.c.fix, c.c.note)
                 .select_from(c.join(t, t.c.id == c.c.id))
                 .where(t.c.loc_path == path, t.c.loc_function == function,
                        t.c.id != (exclude or ""))
                 .order_by(c.c.created.desc(), self._db.order_key(c, self.engine).desc())
                 .limit(limit))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
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
        c = self._db.confirmations
        query = self._db.sa.select(c.c.id).order_by(c.c.created,
                                                     self._db.order_key(c, self.engine))
        if limit is not None:
            query = query.limit(limit).offset(offset)
        with self.engine.connect() as conn:
            ids = [row[0] for row in conn.execute(query)]
        return [r for r in (self.get(tid) for tid in ids) if r is not None]

    def purge(self, *, max_age_days: float | None, max_count: int | None,
              keep_confirmed: bool = True, now: datetime | None = None) -> int:
        """Delete triages older than ``max_age_days`` and, oldest first, those beyond
        ``max_count``; confirmed ones (and their confirmations) stay unless
        ``keep_confirmed`` is False. Returns how many triages were deleted."""
        sa, t, c = self._db.sa, self._db.triages, self._db.confirmations
        spare = [t.c.id.not_in(sa.select(c.c.id))] if keep_confirmed else []
        deleted = 0
        with self.engine.begin() as conn:
            if max_age_days is not None:
                cutoff = ((now or datetime.now(timezone.utc)) - timedelta(days=max_age_days)
                          ).isoformat(timespec="seconds")
                deleted += conn.execute(t.delete().where(t.c.created < cutoff, *spare)).rowcount
            if max_count is not None:
                beyond = (sa.select(t.c.id).where(*spare)
                          .order_by(t.c.created.desc(), self._db.order_key(t, self.engine).desc())
                          .offset(max_count))
                deleted += conn.execute(t.delete().where(t.c.id.in_(beyond))).rowcount
            if not keep_confirmed:
                conn.execute(c.delete().where(c.c.id.not_in(sa.select(t.c.id))))
        return deleted

    def count(self) -> int:
        """How many triages are stored."""
        with self.engine.connect() as conn:
            return int(conn.execute(self._db.sa.select(self._db.sa.func.count())
                                    .select_from(self._db.triages)).scalar_one())

    def close(self) -> None:
        """Release the database connections (the store stays usable: they reopen)."""
        self.engine.dispose()


__all__ = ["MAX_DEPTH", "Records", "json_problem", "location_of", "new_triage_id", "safe_json"]
