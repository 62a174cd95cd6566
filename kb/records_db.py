"""The records database: one SQLAlchemy engine, its tables, and its Alembic migrations.

The triage records (:mod:`kb.records`), the Slack bot's shared state and the
durable replay jobs live in one database, given by URL:

* ``sqlite:///<kb>/records.sqlite`` — the embedded default (WAL mode,
  ``synchronous=NORMAL``, text that is not UTF-8 read with replacement
  characters instead of raising);
* ``postgresql://…`` — a team's server (driver psycopg 3, so the URL is
  rewritten to ``postgresql+psycopg://``).

:func:`open_engine` builds the engine and brings the schema to the newest
revision with Alembic (scripts in ``kb/records_migrations``), inside one
transaction that holds a lock (``BEGIN IMMEDIATE`` on SQLite, an advisory lock
on PostgreSQL), so processes starting together migrate once. A
``records.sqlite`` written before the migrations existed (its tables but no
``alembic_version``) is first stamped at the baseline revision, then
upgraded: nothing stored is lost.

Writes that read before they write (a token bucket, claiming a replay job) use
:func:`write_tx`: ``BEGIN IMMEDIATE`` on SQLite (the write lock up front, so two
processes never deadlock upgrading a read lock), an ordinary transaction with
row locks (``FOR UPDATE``) on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

__all__ = [
    "BASELINE",
    "MIGRATIONS",
    "confirmations",
    "is_sqlite",
    "metadata",
    "normalize_url",
    "open_engine",
    "order_key",
    "replay_job_triages",
    "replay_jobs",
    "revision",
    "slack_buckets",
    "slack_seen",
    "slack_threads",
    "sqlite_url",
    "triages",
    "upsert",
    "write_tx",
]

#: The folder of the Alembic scripts, and the revision a pre-migration ``records.sqlite`` is.
MIGRATIONS = Path(__file__).resolve().parent / "records_migrations"
BASELINE = "0001"
#: The PostgreSQL advisory lock key held while migrating ("sgtr" in ASCII).
_MIGRATE_LOCK = 0x73677472

metadata = sa.MetaData()

#: Stored triages. ``loc_path``/``loc_function`` copy the result's location (indexed, for
#: :meth:`kb.records.Records.similar`); ``seq`` orders rows on servers (SQLite uses rowid).
triages = sa.Table(
    "triages",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created", sa.Text),
    sa.Column("request", sa.Text),
    sa.Column("result", sa.Text),
    sa.Column("loc_path", sa.Text),
    sa.Column("loc_function", sa.Text),
    sa.Column("seq", sa.BigInteger),
    sa.Column("owner", sa.Text),
    sa.Column("confirmed_by", sa.Text),
    sa.Column("size", sa.BigInteger),
)
#: ``owner``: who stored the triage, ``confirmed_by``: who wrote its confirmation
#: (``key:<hash>``, ``slack:<user>``, ``client:<address>``; NULL for rows written before
#: owners existed: the confirmations table keeps its columns, so older code's inserts fit).
#: ``size``: the bytes of the triage's request and result text (the records' byte bound).
confirmations = sa.Table(
    "confirmations",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created", sa.Text),
    sa.Column("fix", sa.Text),
    sa.Column("note", sa.Text),
    sa.Column("source", sa.Text),
    sa.Column("seq", sa.BigInteger),
)
#: The Slack bot's shared state (see ``service.slack.shared``).
slack_seen = sa.Table(
    "slack_seen",
    metadata,
    sa.Column("namespace", sa.Text, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("expires", sa.Float, nullable=False),
)
slack_threads = sa.Table(
    "slack_threads",
    metadata,
    sa.Column("channel", sa.Text, primary_key=True),
    sa.Column("thread_ts", sa.Text, primary_key=True),
    sa.Column("context", sa.Text, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
)
slack_buckets = sa.Table(
    "slack_buckets",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("last", sa.Float, nullable=False),
)
#: Durable replay jobs (see ``service.replay.jobs``) and the triages waiting on each.
replay_jobs = sa.Table(
    "replay_jobs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.Text, nullable=False, unique=True),
    sa.Column("client", sa.Text, nullable=False),
    sa.Column("rank", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("worker", sa.Text),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("claimed_at", sa.Float),
    sa.Column("lease_until", sa.Float),
    sa.Column("finished", sa.Float),
    sa.Column("error", sa.Text),
)
replay_job_triages = sa.Table(
    "replay_job_triages",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("tid", sa.Text, primary_key=True),
)


def normalize_url(url: str) -> str:
    """``url`` with PostgreSQL's driver made explicit (psycopg 3)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def sqlite_url(path: Path) -> str:
    """The URL of the SQLite file ``path``."""
    return f"sqlite:///{Path(path).resolve()}"


def is_sqlite(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "sqlite"


def _on_sqlite_connect(dbapi_con: sqlite3.Connection, _record: Any) -> None:
    dbapi_con.isolation_level = None  # SQLAlchemy's "begin" event below emits BEGIN itself
    # text that is not UTF-8 (written by something else) is read, not raised on
    dbapi_con.text_factory = lambda raw: raw.decode("utf-8", "replace")
    dbapi_con.execute("PRAGMA journal_mode=WAL")
    # as the index does: in WAL mode NORMAL never corrupts the database and spares an
    # fsync per stored triage (a power cut may lose the last few records, a crash none)
    dbapi_con.execute("PRAGMA synchronous=NORMAL")


def _on_sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get("sqlite_immediate")
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def open_engine(url: str, *, migrate: bool = True) -> Engine:
    """An engine for ``url`` (see the module doc), its schema at the newest revision."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        target = sa.engine.make_url(url).database
        if target and target != ":memory:":
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        sa.event.listen(engine, "connect", _on_sqlite_connect)
        sa.event.listen(engine, "begin", _on_sqlite_begin)
    else:
        engine = sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)
    if migrate:
        upgrade(engine)
    return engine


@contextlib.contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: ``BEGIN IMMEDIATE`` on SQLite, plain elsewhere."""
    with engine.connect() as conn:
        if is_sqlite(engine):
            conn.execution_options(sqlite_immediate=True)
        with conn.begin():
            yield conn


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (stamping a pre-migration file first)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with write_tx(engine) as conn:
        if not is_sqlite(engine):
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATE_LOCK})
        cfg.attributes["connection"] = conn
        names = set(sa.inspect(conn).get_table_names())
        if "triages" in names and "alembic_version" not in names:
            command.stamp(cfg, BASELINE)  # written by the code before the migrations
        command.upgrade(cfg, "head")


def revision(engine: Engine) -> str | None:
    """The schema's Alembic revision (``alembic_version``), None before any."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def order_key(table: sa.Table, engine: Engine | Connection) -> sa.ColumnElement[Any]:
    """The insertion order of ``table``'s rows: SQLite's rowid (a replaced row gets a new
    one), the ``seq`` column elsewhere (refreshed by :func:`upsert`)."""
    if is_sqlite(engine):
        return sa.literal_column(f"{table.name}.rowid")
    return table.c.seq


def upsert(conn: Connection, table: sa.Table, values: dict[str, Any]) -> None:
    """Insert ``values`` into ``table`` or replace the row with the same primary key, as
    SQLite's ``INSERT OR REPLACE`` does (the row moves to the end of :func:`order_key`)."""
    if is_sqlite(conn):
        conn.execute(table.insert().prefix_with("OR REPLACE").values(**values))
        return
    from sqlalchemy.dialects.postgresql import insert

    keys = {c.name for c in table.primary_key.columns}
    stmt = insert(table).values(**values)
    update: dict[str, Any] = {k: stmt.excluded[k] for k in values if k not in keys}
    if "seq" in table.c:  # the replaced row moves to the end, as with SQLite's new rowid
        update["seq"] = sa.func.nextval("records_seq")
    conn.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=update))
