"""The Slack bot's state in the records database, shared by every process on it.

Drop-in replacements of the in-memory classes of :mod:`service.slack.state`, used
when ``TRIAGE_DATABASE_URL`` is set (:func:`slack_state`): with them, a Slack
retry delivered to another API worker or another host is still dropped, a
thread's follow-up is answered by whichever process receives it, and the
per-channel rate limit holds across processes. Tables: ``slack_seen``,
``slack_threads``, ``slack_buckets`` (migration 0003 of :mod:`kb.records_db`).

Times are wall-clock seconds (``time.time``): the processes share the database,
not a monotonic clock. Each operation is one short transaction; the token bucket's
read-then-write holds the row (``FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE``
on SQLite), so two processes never spend the same token.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from kb import records_db as db
from service.engine import TriageResult
from service.slack.state import Seen, ThreadContext, ThreadStore, TokenBucket

__all__ = ["DbSeen", "DbThreadStore", "DbTokenBucket", "SlackState", "slack_state"]

#: Expired rows are deleted on every this many additions (each process counts its own).
PRUNE_EVERY = 256


def _insert_ignore(conn: Connection, table: sa.Table, values: dict[str, object]) -> bool:
    """Insert ``values`` unless the primary key is taken; True when inserted."""
    if db.is_sqlite(conn):
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(table).values(**values).on_conflict_do_nothing()
    else:
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt = pg_insert(table).values(**values).on_conflict_do_nothing()
    key = next(iter(table.primary_key.columns))
    return conn.execute(stmt.returning(key)).first() is not None  # rowcount: -1 on psycopg


class DbSeen(Seen):
    """:class:`~service.slack.state.Seen` in ``slack_seen``, one ``namespace`` per use
    (event ids, message ts, request signatures): ``add`` is False when another process
    (or this one) added ``key`` less than ``ttl_s`` ago."""

    def __init__(
        self,
        engine: Engine,
        namespace: str,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine, self.namespace, self.ttl_s, self.clock = engine, namespace, ttl_s, clock
        self._adds = itertools.count(1)

    def add(self, key: str) -> bool:
        t, now = db.slack_seen, self.clock()
        with self.engine.begin() as conn:
            if next(self._adds) % PRUNE_EVERY == 0:
                conn.execute(t.delete().where(t.c.expires < now))
            else:  # an expired entry of this key frees it
                conn.execute(
                    t.delete().where(
                        t.c.namespace == self.namespace, t.c.key == key, t.c.expires < now
                    )
                )
            return _insert_ignore(
                conn, t, {"namespace": self.namespace, "key": key, "expires": now + self.ttl_s}
            )


class DbThreadStore(ThreadStore):
    """:class:`~service.slack.state.ThreadStore` in ``slack_threads``: the context (payload,
    options, triage id and result) as JSON; at most ``max_items`` kept, least recently
    stored dropped first, and none older than ``ttl_s``."""

    def __init__(
        self,
        engine: Engine,
        max_items: int = 2000,
        ttl_s: float = 7 * 86400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine, self.max_items, self.ttl_s, self.clock = engine, max_items, ttl_s, clock
        self._puts = itertools.count(1)

    def get(self, channel: str, thread_ts: str | None) -> ThreadContext | None:
        if not thread_ts:
            return None
        t = db.slack_threads
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(t.c.context, t.c.updated).where(
                    t.c.channel == channel, t.c.thread_ts == thread_ts
                )
            ).first()
        if row is None or row.updated < self.clock() - self.ttl_s:
            return None
        try:
            raw = json.loads(row.context)
            return ThreadContext(
                channel,
                thread_ts,
                raw["payload"],
                raw["options"],
                raw["tid"],
                TriageResult.model_validate(raw["result"]),
            )
        except (ValueError, KeyError, TypeError):  # written by another version: start afresh
            return None

    def put(self, ctx: ThreadContext) -> None:
        t, now = db.slack_threads, self.clock()
        ctx.updated = time.monotonic()
        context = json.dumps(
            {
                "payload": ctx.payload,
                "options": ctx.options,
                "tid": ctx.tid,
                "result": ctx.result.model_dump(mode="json"),
            },
            default=str,
        )
        with self.engine.begin() as conn:
            conn.execute(
                t.delete().where(t.c.channel == ctx.channel, t.c.thread_ts == ctx.thread_ts)
            )
            conn.execute(
                t.insert().values(
                    channel=ctx.channel, thread_ts=ctx.thread_ts, context=context, updated=now
                )
            )
            if next(self._puts) % 64 == 0:
                self._prune(conn, now)

    def _prune(self, conn: Connection, now: float) -> None:
        t = db.slack_threads
        conn.execute(t.delete().where(t.c.updated < now - self.ttl_s))
        beyond = (
            sa.select(t.c.updated).order_by(t.c.updated.desc()).offset(self.max_items).limit(1)
        ).scalar_subquery()
        conn.execute(t.delete().where(t.c.updated <= beyond))


class DbTokenBucket(TokenBucket):
    """:class:`~service.slack.state.TokenBucket` in ``slack_buckets``: every process takes
    from the same per-channel bucket."""

    def __init__(
        self,
        engine: Engine,
        rate: float = 1.0,
        burst: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(rate, burst, clock)
        self.engine = engine

    def try_take(self, key: str) -> float:
        t = db.slack_buckets
        with db.write_tx(self.engine) as conn:
            now = self.clock()
            _insert_ignore(conn, t, {"key": key, "tokens": self.burst, "last": now})
            row = conn.execute(
                sa.select(t.c.tokens, t.c.last).where(t.c.key == key).with_for_update()
            ).one()
            tokens = min(self.burst, row.tokens + max(0.0, now - row.last) * self.rate)
            taken = tokens >= 1.0
            conn.execute(
                t.update()
                .where(t.c.key == key)
                .values(tokens=tokens - 1.0 if taken else tokens, last=now)
            )
        return 0.0 if taken else (1.0 - tokens) / self.rate


@dataclass
class SlackState:
    """What the bot keeps between events: event ids and message ts seen, thread contexts,
    the per-channel rate limit, and (HTTP mode) the form-post signatures seen."""

    events: Seen
    messages: Seen
    threads: ThreadStore
    bucket: TokenBucket
    signatures: Seen


def slack_state(engine: Engine | None) -> SlackState:
    """In the database of ``engine`` (shared by every process on it), or in this process's
    memory when ``engine`` is None (the embedded default: one worker)."""
    signature_ttl = 6 * 60.0  # Bolt refuses timestamps older than five minutes
    if engine is None:
        return SlackState(Seen(), Seen(), ThreadStore(), TokenBucket(), Seen(ttl_s=signature_ttl))
    return SlackState(
        DbSeen(engine, "event"),
        DbSeen(engine, "message"),
        DbThreadStore(engine),
        DbTokenBucket(engine),
        DbSeen(engine, "signature", ttl_s=signature_ttl),
    )
