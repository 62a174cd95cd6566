"""The structured index's schema migration and bulk writer."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kb.errors import KBError
from kb.store import SCHEMA_VERSION, Store, pack_text

#: The parts of schema 1 that schema 2 changed.
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE releases (
    version TEXT PRIMARY KEY, origin TEXT, content_hash TEXT, status TEXT,
    files INTEGER, functions INTEGER, chunks INTEGER, checks INTEGER, refs INTEGER,
    flags INTEGER, parse_errors INTEGER, embedded_scope TEXT, ingested_at TEXT, timings TEXT);
CREATE TABLE files (release TEXT, path TEXT, sha256 TEXT, lines INTEGER, parse_errors TEXT,
    text BLOB, PRIMARY KEY (release, path));
CREATE TABLE chunks (id TEXT, release TEXT, path TEXT, qualname TEXT, kind TEXT,
    start_line INTEGER, end_line INTEGER, part INTEGER, parts INTEGER, text_hash TEXT, text TEXT,
    PRIMARY KEY (release, id));
CREATE INDEX chunks_hash ON chunks (text_hash);
CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    release UNINDEXED, chunk_id UNINDEXED, body, tokenize = 'unicode61');
"""


#: A schema-4 index turned back into schema 3's release-keyed tables (empty).
SCHEMA_3_FROM_4 = """
DROP VIEW files; DROP VIEW functions; DROP VIEW chunks; DROP VIEW checks; DROP VIEW calls;
CREATE TABLE files (release TEXT, path TEXT, sha256 TEXT, lines INTEGER, parse_errors TEXT,
    text BLOB, all_refs BLOB, PRIMARY KEY (release, path));
CREATE TABLE functions (release TEXT, path TEXT, qualname TEXT, name TEXT, class_name TEXT,
    start_line INTEGER, end_line INTEGER, decorator_start INTEGER, signature TEXT,
    decorators TEXT, docstring TEXT, parent TEXT);
CREATE TABLE chunks (seq INTEGER PRIMARY KEY, id TEXT, release TEXT, path TEXT, qualname TEXT,
    kind TEXT, start_line INTEGER, end_line INTEGER, part INTEGER, parts INTEGER,
    text_hash TEXT, text TEXT, UNIQUE (release, id));
CREATE TABLE checks (id INTEGER PRIMARY KEY AUTOINCREMENT, release TEXT, path TEXT,
    function TEXT, kind TEXT, exc_type TEXT, bare INTEGER, condition TEXT, message TEXT,
    start_line INTEGER, end_line INTEGER, test_start INTEGER, test_end INTEGER, guards TEXT,
    source TEXT);
CREATE TABLE calls (release TEXT, path TEXT, callee TEXT, caller TEXT, caller_start INTEGER,
    line INTEGER, guards TEXT);
DROP TABLE release_files; DROP TABLE units; DROP TABLE unit_functions; DROP TABLE unit_chunks;
DROP TABLE unit_checks; DROP TABLE unit_calls;
"""


def test_a_schema_1_index_is_migrated_keeping_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    con = sqlite3.connect(path)
    con.executescript(SCHEMA_1)
    con.execute("INSERT INTO releases (version, status) VALUES ('0.5.11', 'indexed')")
    con.execute(
        "INSERT INTO files VALUES ('0.5.11', 'sglang/a.py', 's', 2, '[]', ?)",
        (pack_text("def topk_check():\n    assert speculative_eagle_topk == 1\n"),),
    )
    con.execute(
        "INSERT INTO chunks VALUES ('sglang/a.py:1-2:function', '0.5.11', 'sglang/a.py', "
        "'topk_check', 'function', 1, 2, 1, 1, 'h', "
        "'def topk_check():\n    assert speculative_eagle_topk == 1')"
    )
    con.execute("INSERT INTO chunks_fts VALUES ('0.5.11', 'sglang/a.py:1-2:function', 'x')")
    con.commit()
    con.close()
    store = Store(path)
    assert store.query("SELECT value FROM meta WHERE key = 'schema_version'")[0][0] == str(
        SCHEMA_VERSION
    )
    assert store.release("0.5.11")["content_hash"] is None  # re-indexed by the next ingest
    assert store.fts("speculative eagle topk", "0.5.11")[0][0] == "sglang/a.py:1-2:function"
    assert store.chunks("0.5.11", ["sglang/a.py:1-2:function"])[0]["qualname"] == "topk_check"
    assert not store.query("SELECT 1 FROM sqlite_master WHERE name = 'chunks_hash'")
    Store(path)  # a second opener finds the work done
    store.delete_release("0.5.11")
    assert store.fts("speculative eagle topk", "0.5.11") == []


def test_a_schema_2_index_is_marked_for_re_indexing(tmp_path: Path) -> None:
    """Schema 3 adds ``calls``: a schema-2 release has none, so its hash no longer matches
    and the next ingest re-indexes it, while its rows stay readable meanwhile."""
    path = tmp_path / "index.sqlite"
    store = Store(path)
    store.replace_release(
        "0.5.11", {"version": "0.5.11", "origin": "t", "content_hash": "h", "status": "indexed"}, {}
    )
    store.close()
    con = sqlite3.connect(path)
    con.executescript(SCHEMA_3_FROM_4)
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.execute("DROP TABLE calls")
    con.commit()
    con.close()
    store = Store(path)
    assert store.query("SELECT value FROM meta WHERE key = 'schema_version'")[0][0] == str(
        SCHEMA_VERSION
    )
    assert store.release("0.5.11")["content_hash"] is None
    assert store.calls("0.5.11", "sglang/srt/server_args.py") == []


def test_a_writer_that_fails_leaves_the_old_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "index.sqlite")
    row = {"version": "0.5.11", "origin": "test", "content_hash": "h", "status": "indexed"}
    chunk = (
        "sglang/a.py:1-1:module",
        "0.5.11",
        "sglang/a.py",
        "<module>",
        "module",
        1,
        1,
        1,
        1,
        "h1",
        "speculative_eagle_topk = 1",
    )
    store.replace_release("0.5.11", row, {"chunks": [chunk]})
    with pytest.raises(RuntimeError), store.release_writer("0.5.11") as writer:
        writer.add("chunks", [(*chunk[:-1], "page_size = 16")])
        raise RuntimeError("killed")
    with pytest.raises(KBError), store.release_writer("0.5.11") as writer:
        pass  # no finish(): rolled back too
    assert [c for c, _ in store.fts("speculative eagle topk", "0.5.11")] == [chunk[0]]
    assert store.fts("page size", "0.5.11") == []
    assert store.release("0.5.11")["content_hash"] == "h"


def test_an_index_of_a_newer_schema_is_refused_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    con.commit()
    con.close()
    with pytest.raises(KBError, match="newer than this sglang-triage") as info:
        Store(path)
    assert info.value.details == {
        "kb": str(path),
        "schema": SCHEMA_VERSION + 1,
        "supported": SCHEMA_VERSION,
    }


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_functions_by_name_are_the_views_rows(store: Store, release: str) -> None:
    """The name-index lookup returns exactly the ``functions`` view's rows, in path order."""
    view = "SELECT * FROM functions WHERE release = ? AND {} = ? ORDER BY path"
    for name in ("__post_init__", "get_device", "check_server_args", "no_such_function"):
        rows = [dict(r) for r in store.query(view.format("name"), (release, name))]
        assert store.functions_named(release, name) == rows
    qual = "ServerArgs.__post_init__"
    rows = [dict(r) for r in store.query(view.format("qualname"), (release, qual))]
    assert rows and store.functions_named(release, qualname=qual) == rows
    assert store.function(release, qual) == rows[0]
    assert store.function(release, qual, path=rows[-1]["path"]) == rows[-1]
    assert store.function(release, qual, path="no/such.py") is None
