"""The content-addressed KB on two consecutive real releases: unchanged files are stored
once, and an index of the release-keyed layout (schema 3) migrates reading the same."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ingest.pipeline import index_structure
from kb.knowledge import KnowledgeBase
from kb.schema import COLUMNS, SCHEMA_VERSION, UNIT_TABLES, register_functions
from kb.store import Store
from service.engine import Engine

pytestmark = pytest.mark.long_pole  # minutes: scheduled first (tests/conftest.py)

OLD, NEW = "0.5.11", "0.5.12"
SA = "sglang/srt/server_args.py"


@pytest.fixture(scope="module")
def two_releases(kb_settings, sglang_source, tmp_path_factory):
    kb = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path_factory.mktemp("ca")}))
    reports = [index_structure(kb, sglang_source(v)) for v in (OLD, NEW)]
    yield kb, reports
    kb.close()


def _count(store: Store, sql: str, params: tuple = ()) -> int:
    return int(store.query(sql, params)[0][0])


def _shas(store: Store, version: str) -> dict[str, str]:
    return {
        r["path"]: r["sha256"]
        for r in store.query("SELECT path, sha256 FROM files WHERE release = ?", (version,))
    }


def _digest(path: Path) -> dict[tuple[str, str], tuple[int, str]]:
    """Per (table, release): row count and a hash of the rows as readers see them
    (without the surrogate keys: ``chunks.seq`` and ``checks.id``)."""
    con = sqlite3.connect(path)
    register_functions(con)
    out = {}
    for table in UNIT_TABLES:
        cols = ", ".join(c for c in COLUMNS[table] if c != "id" or table == "chunks")
        for (version,) in con.execute("SELECT version FROM releases").fetchall():
            h, n = hashlib.sha256(), 0
            for row in con.execute(
                f"SELECT {cols} FROM {table} WHERE release = ? ORDER BY {cols}", (version,)
            ):
                h.update(repr(row).encode())
                n += 1
            out[(table, version)] = (n, h.hexdigest())
    con.close()
    return out


def _as_schema_3(src: Path, dest: Path) -> None:
    """Write ``src``'s index in the release-keyed layout of schema 3 (every release's
    rows copied out of the views, the keyword index rebuilt over them)."""
    con = sqlite3.connect(dest)
    register_functions(con)
    with sqlite3.connect(src) as live:  # the backup API: a consistent copy, WAL included
        live.backup(con)
    for table in UNIT_TABLES:
        cols = ", ".join(c for c in COLUMNS[table] if c != "id" or table == "chunks")
        lead = (
            "ROW_NUMBER() OVER () AS seq, "
            if table == "chunks"
            else "ROW_NUMBER() OVER () AS id, "
            if table == "checks"
            else ""
        )
        con.execute(f"CREATE TABLE v3_{table} AS SELECT {lead}{cols} FROM {table}")
    for table in UNIT_TABLES:
        con.execute(f"DROP VIEW {table}")
    for table in UNIT_TABLES:
        con.execute(f"DROP TABLE {'release_files' if table == 'files' else 'unit_' + table}")
        con.execute(f"ALTER TABLE v3_{table} RENAME TO {table}")
    con.execute("DROP TABLE units")
    con.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('delete-all')")
    con.executemany(
        "INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)",
        [
            (seq, f"{path} {qualname}\n{text}")
            for seq, path, qualname, text in con.execute(
                "SELECT seq, path, qualname, text FROM chunks"
            ).fetchall()
        ],
    )
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.commit()
    con.close()


def _bare_assert_log(store: Store, version: str) -> str:
    """A one-frame crash log of the first bare assert of ``version``'s ``server_args.py``."""
    check = store.checks(version, path=SA, where="bare = 1 AND start_line = end_line")[0]
    line = store.file_lines(version, SA, check.start_line, check.start_line)[0].strip()
    function = (check.function or "").rsplit(".", 1)[-1]
    return (
        "Traceback (most recent call last):\n"
        f'  File "/usr/lib/python3.11/site-packages/{SA}", line {check.start_line}, '
        f"in {function}\n    {line}\nAssertionError\n"
    )


def _answer(kb: KnowledgeBase, log: str, version: str) -> dict:
    """The answer without what differs between runs: its id, its timings, and the checks'
    surrogate keys (the index's own ids, kept by the migration but not across copies)."""
    result = Engine(kb).triage(log, release=version).model_dump(mode="json")
    return _without_ids({k: v for k, v in result.items() if k != "timings_ms"})


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k != "id"}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def test_an_index_of_the_release_keyed_layout_migrates_reading_the_same(
    two_releases, kb_settings, tmp_path
) -> None:
    kb, _ = two_releases
    old_layout = tmp_path / "index.sqlite"
    _as_schema_3(kb.store.path, old_layout)
    want = _digest(kb.store.path)
    assert _digest(old_layout) == want
    store = Store(old_layout)
    assert _count(store, "SELECT value FROM meta WHERE key = 'schema_version'") == SCHEMA_VERSION
    assert _digest(old_layout) == want
    assert _count(store, "SELECT COUNT(*) FROM units") < _count(store, "SELECT COUNT(*) FROM files")
    for version in (OLD, NEW):
        assert store.release(version)["content_hash"] == kb.store.release(version)["content_hash"]
        assert store.fts("speculative eagle topk", version) == kb.store.fts(
            "speculative eagle topk", version
        )
    # and the engine answers from the migrated KB exactly as from the one it came from
    store.close()
    migrated = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path}))
    for version in (OLD, NEW):
        log = _bare_assert_log(kb.store, version)
        assert _answer(migrated, log, version) == _answer(kb, log, version)


def test_unchanged_files_are_stored_once(two_releases) -> None:
    kb, (old, new) = two_releases
    store = kb.store
    a, b = _shas(store, OLD), _shas(store, NEW)
    same = {p for p, sha in b.items() if a.get(p) == sha}
    assert len(same) > len(b) // 2  # consecutive releases share most files
    assert (new.reused_files, new.parsed) == (len(same), len(b) - len(same))
    assert _count(store, "SELECT COUNT(*) FROM units") == len(a) + len(b) - len(same)
    marks = ", ".join("?" * len(same))
    for table in UNIT_TABLES[1:]:
        in_old = _count(store, f"SELECT COUNT(*) FROM {table} WHERE release = ?", (OLD,))
        only_new = _count(
            store,
            f"SELECT COUNT(*) FROM {table} WHERE release = ? AND path NOT IN ({marks})",
            (NEW, *sorted(same)),
        )
        assert _count(store, f"SELECT COUNT(*) FROM unit_{table}") == in_old + only_new, table
    # each release still reads all of its own rows
    assert (
        _count(store, "SELECT COUNT(*) FROM functions WHERE release = ?", (NEW,)) == new.functions
    )
    # deleting the older release (last: the module's KB is left with NEW only) keeps the shared analyses the newer one links to
    before = _digest(store.path)[("checks", NEW)]
    kb.store.delete_release(OLD)
    assert _count(store, "SELECT COUNT(*) FROM units") == len(b)
    assert _digest(store.path)[("checks", NEW)] == before
