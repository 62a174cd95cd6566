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
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb.errors import TriageError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


#: How deep a JSON value may nest: deeper is refused on the way in and damaged when read.
MAX_DEPTH = 32
_DAMAGED = object()


class ConfirmRefused(TriageError):
    """A confirmation the caller may not write (see :meth:`Records.confirm`'s ``check``)."""


#: ``check(triage_owner, confirmed, confirmation_owner)``: why the write is refused, or None.
ConfirmCheck = Callable[[str | None, bool, str | None], str | None]


def owner_check(owner: str | None, *, team: bool = False, any_first: bool = False) -> ConfirmCheck:
    """The confirmation rule for a writer ``owner`` (a team key when ``team``): the triage's
    owner may confirm it (anyone may confirm a triage stored before owners existed; with
    ``any_first``, anyone may make the first confirmation: the Slack users of a thread), and
    an existing confirmation may be replaced only by whoever wrote it; a team key may do both."""

    def check(triage_owner: str | None, confirmed: bool, confirmed_by: str | None) -> str | None:
        if team:
            return None
        if triage_owner is not None and triage_owner != owner and not any_first:
            return "only the client that made this triage (or a team key) may confirm it"
        if confirmed and (confirmed_by is None or confirmed_by != owner):
            return (
                "this triage was confirmed by someone else; only they (or a team key) may change it"
            )
        return None

    return check


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
    return (
        path if isinstance(path, str) else None,
        function if isinstance(function, str) else None,
    )


class Records:
    """Stored triages and their confirmations, in the database at ``where``.

    ``where`` is the SQLite file's path (a :class:`~pathlib.Path`, the embedded default) or
    a database URL (``sqlite:///…``, ``postgresql://…``). Safe to share between threads.
    """

    def __init__(self, where: Path | str) -> None:
        import sqlalchemy as sa

        from kb import records_db as db

        self._db = db
        self._sa = sa
        if isinstance(where, Path):
            self.path: Path | None = where
            self.url = db.sqlite_url(where)
        else:
            self.url = db.normalize_url(where)
            name = sa.engine.make_url(self.url).database if self.url.startswith("sqlite") else None
            self.path = Path(name) if name else None
        self.engine: Engine = db.open_engine(self.url)
        self._sqlite = db.is_sqlite(self.engine)

    def revision(self) -> str | None:
        """The schema's revision (the ``alembic_version`` table)."""
        return self._db.revision(self.engine)

    def _text(self, value: str) -> str:
        """PostgreSQL's text refuses NUL characters; SQLite stores them as given."""
        return value if self._sqlite else value.replace("\x00", "")

    def save(
        self,
        tid: str,
        request: dict[str, Any],
        result: dict[str, Any] | str,
        owner: str | None = None,
    ) -> int:
        """Store (or replace) triage ``tid``; ``result`` as a dict or already-encoded JSON.

        ``owner`` is who made it (``key:<hash>``, ``slack:<user>``, ``client:<address>``);
        when None, a replaced triage keeps its owner (a replay's verdicts written later).
        Returns the bytes stored (request and result text: the row's ``size``)."""
        t = self._db.triages
        encoded = self._text(result if isinstance(result, str) else json.dumps(result, default=str))
        req = json.dumps(request, default=str)
        size = len(req.encode("utf-8", "replace")) + len(encoded.encode("utf-8", "replace"))
        path, function = location_of(result)
        with self._db.write_tx(self.engine) as conn:  # reads the owner, then writes
            before = conn.execute(
                self._sa.select(t.c.owner, t.c.confirmed_by).where(t.c.id == tid)
            ).first()
            if owner is None and before is not None:
                owner = before[0]
            self._db.upsert(
                conn,
                t,
                {
                    "id": tid,
                    "created": _now(),
                    "request": req,
                    "result": encoded,
                    "loc_path": path,
                    "loc_function": function,
                    "owner": owner,
                    "size": size,
                    "confirmed_by": before[1] if before is not None else None,
                },
            )
        return size

    def owners(self, tid: str) -> tuple[str | None, bool, str | None] | None:
        """``(triage owner, confirmed, confirmation owner)`` of triage ``tid``, None when it is
        not stored (owners are None for rows stored before owners existed)."""
        sa, t, c = self._sa, self._db.triages, self._db.confirmations
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(t.c.owner, c.c.id, t.c.confirmed_by)
                .select_from(t.outerjoin(c, c.c.id == t.c.id))
                .where(t.c.id == tid)
            ).first()
        return None if row is None else (row[0], row[1] is not None, row[2])

    def get(self, tid: str) -> dict[str, Any] | None:
        """The stored triage ``tid`` with its confirmation; a damaged part is None and named
        in ``damaged`` (never an exception)."""
        t, c = self._db.triages, self._db.confirmations
        with self.engine.connect() as conn:
            row = (
                conn.execute(
                    self._sa.select(t.c.id, t.c.created, t.c.request, t.c.result).where(
                        t.c.id == tid
                    )
                )
                .mappings()
                .first()
            )
            if row is None:
                return None
            conf = (
                conn.execute(
                    self._sa.select(c.c.id, c.c.created, c.c.fix, c.c.note, c.c.source).where(
                        c.c.id == tid
                    )
                )
                .mappings()
                .first()
            )
        damaged: list[str] = []

        def read(name: str, text: str | None) -> Any:
            value = safe_json(text)
            if value is _DAMAGED:
                damaged.append(name)
                return None
            return value

        out = {
            "id": row["id"],
            "created": row["created"],
            "request": read("request", row["request"]),
            "result": read("result", row["result"]),
            "confirmation": None,
        }
        if conf is not None:
            note = conf["note"] or ""
            if not _clean(note):
                damaged.append("confirmation.note")
                note = ""
            out["confirmation"] = dict(conf) | {
                "fix": read("confirmation.fix", conf["fix"]),
                "note": note,
            }
        if damaged:
            out["damaged"] = damaged
        return out

    def confirm(
        self,
        tid: str,
        fix: dict[str, Any],
        note: str = "",
        source: str = "api",
        *,
        owner: str | None = None,
        check: ConfirmCheck | None = None,
    ) -> bool:
        """Record that ``fix`` resolved triage ``tid`` (False when it is not stored), made by
        ``owner``. ``check(triage_owner, confirmed, confirmation_owner)`` runs in the same
        transaction, before anything is written: a reason it returns is raised as
        :class:`ConfirmRefused` and nothing changes."""
        sa, t, c = self._sa, self._db.triages, self._db.confirmations
        with self._db.write_tx(self.engine) as conn:
            row = conn.execute(
                sa.select(t.c.owner, c.c.id, t.c.confirmed_by)
                .select_from(t.outerjoin(c, c.c.id == t.c.id))
                .where(t.c.id == tid)
            ).first()
            if row is None:
                return False
            problem = check(row[0], row[1] is not None, row[2]) if check else None
            if problem:
                raise ConfirmRefused(problem)
            self._db.upsert(
                conn,
                c,
                {
                    "id": tid,
                    "created": _now(),
                    "fix": json.dumps(fix),
                    "note": self._text(note),
                    "source": source,
                },
            )
            conn.execute(t.update().where(t.c.id == tid).values(confirmed_by=owner))
        return True

    def similar(
        self,
        path: str,
        function: str,
        *,
        exclude: str | None = None,
        limit: int = 3,
        show_id: Callable[[str | None], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Confirmed past triages that failed in the same function, newest first, with their fixes.

        Filtered by the indexed location columns (copied from the result when it is
        saved), over the confirmed triages only: an unconfirmed record is never decoded.
        With ``show_id``, an entry whose triage owner it refuses has no ``id`` (the caller
        may not read that triage).
        """
        sa, t, c = self._sa, self._db.triages, self._db.confirmations
        query = (
            sa.select(t.c.id, t.c.result, c.c.created, c.c.fix, c.c.note, t.c.owner)
            .select_from(c.join(t, t.c.id == c.c.id))
            .where(t.c.loc_path == path, t.c.loc_function == function, t.c.id != (exclude or ""))
            .order_by(c.c.created.desc(), self._db.order_key(c, self.engine).desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        out: list[dict[str, Any]] = []
        for row in rows:
            result, fix = safe_json(row["result"]), safe_json(row["fix"])
            note = row["note"] or ""
            # U+FFFD: bytes that were not UTF-8, replaced when read (records_db's text factory)
            damaged_note = not _clean(note) or "\ufffd" in note
            if not isinstance(result, dict) or fix is _DAMAGED or damaged_note:
                continue  # a damaged record is left out, never passed on
            entry = {
                "id": row["id"],
                "release": (result.get("release") or {}).get("release"),
                "summary": result.get("summary"),
                "confirmed_fix": fix,
                "note": note,
                "confirmed_at": row["created"],
            }
            if show_id is not None and not show_id(row["owner"]):
                del entry["id"]
            out.append(entry)
        return out

    def confirmed(self, *, limit: int | None = None, offset: int = 0) -> list[dict[str, Any]]:
        """Confirmed triages, oldest first (a page of them with ``limit``/``offset``)."""
        c = self._db.confirmations
        query = self._sa.select(c.c.id).order_by(c.c.created, self._db.order_key(c, self.engine))
        if limit is not None:
            query = query.limit(limit).offset(offset)
        with self.engine.connect() as conn:
            ids = [row[0] for row in conn.execute(query)]
        return [r for r in (self.get(tid) for tid in ids) if r is not None]

    def purge(
        self,
        *,
        max_age_days: float | None,
        max_count: int | None,
        keep_confirmed: bool = True,
        now: datetime | None = None,
        max_bytes: int | None = None,
    ) -> int:
        """Delete triages older than ``max_age_days`` and, oldest first, those beyond
        ``max_count``, then, oldest first, unconfirmed ones until all stored triages take at
        most ``max_bytes`` (their ``size``); confirmed ones (and their confirmations) stay
        unless ``keep_confirmed`` is False. Returns how many triages were deleted."""
        sa, t, c = self._sa, self._db.triages, self._db.confirmations
        spare = [t.c.id.not_in(sa.select(c.c.id))] if keep_confirmed else []
        deleted = 0
        with self.engine.begin() as conn:
            if max_age_days is not None:
                cutoff = (
                    (now or datetime.now(timezone.utc)) - timedelta(days=max_age_days)
                ).isoformat(timespec="seconds")
                deleted += conn.execute(t.delete().where(t.c.created < cutoff, *spare)).rowcount
            if max_count is not None:
                beyond = (
                    sa.select(t.c.id)
                    .where(*spare)
                    .order_by(t.c.created.desc(), self._db.order_key(t, self.engine).desc())
                    .offset(max_count)
                )
                deleted += conn.execute(t.delete().where(t.c.id.in_(beyond))).rowcount
            if max_bytes is not None:
                deleted += self._purge_bytes(conn, max_bytes, spare)
            if not keep_confirmed:
                conn.execute(c.delete().where(c.c.id.not_in(sa.select(t.c.id))))
        return deleted

    def _purge_bytes(self, conn: Any, max_bytes: int, spare: list[Any]) -> int:
        """Delete the oldest purgeable triages (``spare`` excludes the kept ones) until every
        stored triage together takes at most ``max_bytes``."""
        sa, t = self._sa, self._db.triages
        size = sa.func.coalesce(t.c.size, 0)
        total = int(conn.execute(sa.select(sa.func.coalesce(sa.func.sum(size), 0))).scalar_one())
        if total <= max_bytes:
            return 0
        kept = int(
            conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(size), 0)).where(
                    sa.not_(sa.and_(*spare)) if spare else sa.false()
                )
            ).scalar_one()
        )
        budget = max_bytes - kept  # what the purgeable ones may still take, newest first
        running = sa.func.sum(size).over(
            order_by=[t.c.created.desc(), self._db.order_key(t, self.engine).desc()]
        )
        ranked = sa.select(t.c.id.label("id"), running.label("upto")).where(*spare).subquery()
        doomed = sa.select(ranked.c.id).where(ranked.c.upto > budget)
        return int(conn.execute(t.delete().where(t.c.id.in_(doomed))).rowcount)

    def size_bytes(self) -> int:
        """The bytes every stored triage takes (request and result text)."""
        sa, t = self._sa, self._db.triages
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(sa.func.coalesce(t.c.size, 0)), 0))
                ).scalar_one()
            )

    def count(self) -> int:
        """How many triages are stored."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    self._sa.select(self._sa.func.count()).select_from(self._db.triages)
                ).scalar_one()
            )

    def close(self) -> None:
        """Release the database connections (the store stays usable: they reopen)."""
        self.engine.dispose()


__all__ = [
    "MAX_DEPTH",
    "ConfirmCheck",
    "ConfirmRefused",
    "Records",
    "json_problem",
    "location_of",
    "new_triage_id",
    "owner_check",
    "safe_json",
]
