"""Incremental ingest: unchanged files are linked to their stored analysis, not re-parsed,
and the release reads exactly as a fresh parse."""

from __future__ import annotations

import sqlite3

from ingest.pipeline import embed_release, index_structure, ingest
from kb.knowledge import KnowledgeBase
from kb.schema import register_functions
from kb.sources import read_local
from tests.trees import release_tree

SA = "sglang/srt/server_args.py"
UNCHANGED = [
    "sglang/launch_server.py",
    "sglang/srt/configs/device_config.py",
    "sglang/srt/server_args_config_parser.py",
]
#: Reads a field that only 0.5.12's catalog declares, and one both declare.
USER = (
    "def start(server_args):\n"
    "    if server_args.detokenizer_worker_num > 1:\n"
    "        assert server_args.tp_size >= 1, 'tp'\n"
    "    return server_args.tp_size\n"
)
#: Per-file tables, compared without their surrogate keys (chunks.seq, checks.id).
TABLES = {
    "files": "path",
    "functions": "path, start_line, qualname",
    "chunks": "path, start_line, kind",
    "checks": "path, start_line, kind",
    "refs": "path, line, attr, kind",
    "flags": "attr",
    "declarations": "attr, line",
    "flag_spellings": "spelling",
}


def _rows(kb: KnowledgeBase, version: str) -> dict[str, list[tuple]]:
    con = sqlite3.connect(kb.store.path)
    register_functions(con)
    out = {}
    for table, order in TABLES.items():
        cols = [
            r[1]
            for r in con.execute(f"PRAGMA table_info({table})")
            if r[1] not in ("seq", "release") and not (table == "checks" and r[1] == "id")
        ]
        out[table] = con.execute(
            f"SELECT {', '.join(cols)} FROM {table} WHERE release = ? ORDER BY {order}", (version,)
        ).fetchall()
    con.close()
    return out


def test_next_release_copies_unchanged_files_and_equals_a_fresh_parse(
    kb_settings, sglang_source, tmp_path
) -> None:
    old, new = sglang_source("0.5.11").root, sglang_source("0.5.12").root
    common = {rel: old / rel for rel in UNCHANGED}
    assert all((old / r).read_bytes() == (new / r).read_bytes() for r in UNCHANGED)
    tree_a = release_tree(tmp_path / "a", "0.0.1", {**common, SA: old / SA, "sglang/user.py": USER})
    tree_b = release_tree(tmp_path / "b", "0.0.2", {**common, SA: new / SA, "sglang/user.py": USER})

    incremental = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path / "inc"}))
    assert index_structure(incremental, read_local(tree_a)).reused_files == 0
    rep = index_structure(incremental, read_local(tree_b))
    # version.py and server_args.py changed; the rest is linked to 0.0.1's analyses
    assert (rep.reused_files, rep.parsed) == (4, 2)

    fresh = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path / "fresh"}))
    alone = index_structure(fresh, read_local(tree_b))
    assert alone.reused_files == 0 and alone.parsed == 6
    got, want = _rows(incremental, "0.0.2"), _rows(fresh, "0.0.2")
    for table in TABLES:
        assert got[table] == want[table], table
    assert (rep.functions, rep.chunks, rep.checks, rep.refs) == (
        alone.functions,
        alone.chunks,
        alone.checks,
        alone.refs,
    )
    # the copied file's refs are filtered by 0.0.2's catalog, not 0.0.1's
    user_refs = {r[2] for r in got["refs"] if r[0] == "sglang/user.py"}
    assert "detokenizer_worker_num" in user_refs
    assert "detokenizer_worker_num" not in {
        r["attr"]
        for r in incremental.store.query(
            "SELECT attr FROM refs WHERE release = '0.0.1' AND path = 'sglang/user.py'"
        )
    }
    # keyword search sees the copied chunks of the new release
    hits = dict(incremental.store.fts("detokenizer worker num", "0.0.2"))
    assert any(cid.startswith("sglang/user.py:") for cid in hits)
    # the unchanged files are stored once: 6 files of 0.0.1, plus 0.0.2's two changed ones
    count = lambda sql: incremental.store.query(sql)[0][0]  # noqa: E731
    assert count("SELECT COUNT(*) FROM units") == 8
    assert count("SELECT COUNT(*) FROM unit_checks") < count("SELECT COUNT(*) FROM checks")
    # analyses stored by other extraction code are never linked, and forcing parses anew
    assert index_structure(incremental, read_local(tree_b), force=True).reused_files == 0
    incremental.store.connection().execute("UPDATE units SET code = 'other'")
    tree_c = release_tree(tmp_path / "c", "0.0.3", {**common, SA: new / SA, "sglang/user.py": USER})
    assert index_structure(incremental, read_local(tree_c)).reused_files == 0


def test_re_ingest_after_deleting_a_release_leaves_no_stale_keyword_rows(
    kb_settings, sglang_source, tmp_path
) -> None:
    old = sglang_source("0.5.11").root
    tree = release_tree(tmp_path / "a", "0.0.1", {rel: old / rel for rel in UNCHANGED})
    kb = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path / "kb"}))
    index_structure(kb, read_local(tree))
    before = kb.store.fts("server args config parser", "0.0.1")
    index_structure(kb, read_local(tree), force=True)
    assert kb.store.fts("server args config parser", "0.0.1") == before
    kb.store.delete_release("0.0.1")
    assert kb.store.fts("server args config parser", "0.0.1") == []
    n_fts = kb.store.query("SELECT COUNT(*) AS n FROM chunks_fts_docsize")[0]["n"]
    assert n_fts == 0


def test_vectors_are_reconciled_with_the_chunk_rows(kb_settings, sglang_source, tmp_path) -> None:
    old = sglang_source("0.5.11").root
    tree = release_tree(
        tmp_path / "a",
        "0.0.1",
        {
            "sglang/launch_server.py": old / "sglang/launch_server.py",
            "sglang/srt/configs/device_config.py": old / "sglang/srt/configs/device_config.py",
        },
    )
    kb = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path / "kb"}))
    rep = ingest(kb, read_local(tree), scope="default")
    ids = sorted(kb.vectors.release_hashes("0.0.1"))
    assert rep.upserted == len(ids) > 0
    # a vector left by older chunking, and one made from another text
    vec = kb.vectors.collection.get(ids=[ids[0]], include=["embeddings"])["embeddings"][0]
    kb.vectors.upsert(["0.0.1:gone.py:1-2:module"], [vec], [{"release": "0.0.1"}])
    kb.vectors.upsert([ids[0]], [vec], [{"release": "0.0.1", "text_hash": "older text"}])
    embed_release(kb, "0.0.1", "default", rep)
    hashes = kb.vectors.release_hashes("0.0.1")
    assert sorted(hashes) == ids and "older text" not in hashes.values()
    assert rep.upserted == 1  # only the outdated vector was written again
