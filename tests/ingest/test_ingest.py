"""The structured index of real releases (0.5.9, 0.5.11 and 0.5.23 from PyPI)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from ingest.pipeline import in_scope, index_structure, ingest
from kb.knowledge import KnowledgeBase
from kb.sources import read_local

SPEC_FN = "ServerArgs._handle_speculative_decoding"
SA = "sglang/srt/server_args.py"


def _ast_function(text: str, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(text)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_handle_speculative_decoding_spans_exactly_its_source_lines(kb: KnowledgeBase) -> None:
    fn = kb.store.function("0.5.11", SPEC_FN, SA)
    assert fn is not None
    node = _ast_function(
        kb.store.file_text("0.5.11", SA), "ServerArgs", "_handle_speculative_decoding"
    )
    assert (fn["start_line"], fn["end_line"]) == (node.lineno, node.end_lineno)
    assert fn["signature"] == "def _handle_speculative_decoding(self)"


def test_bare_assert_under_num_steps_is_found_with_guards_and_lines(kb: KnowledgeBase) -> None:
    bare = [c for c in kb.store.checks("0.5.11", path=SA, function=SPEC_FN) if c.bare]
    assert len(bare) == 1  # "exactly one bare assert" (seed case facts)
    check = bare[0]
    assert (check.start_line, check.end_line) == (3519, 3522)
    assert (check.test_start, check.test_end) == (3520, 3521)
    assert "self.speculative_eagle_topk is None" in check.condition
    assert "self.speculative_num_draft_tokens is None" in check.condition
    guards = [(g["condition"], g["polarity"]) for g in check.guards]
    assert guards[-1] == ("self.speculative_num_steps is None", True)
    assert any("EAGLE3" in c and p for c, p in guards)
    lines = kb.store.file_lines("0.5.11", SA, 3518, 3522)
    assert lines[0].strip() == "if self.speculative_num_steps is None:"
    assert lines[1].strip() == "assert ("


def test_flag_maps_to_attribute_with_type_and_default(kb: KnowledgeBase) -> None:
    flags = {s: f for f in kb.store.flags("0.5.11") for s in f["flags"]}
    topk = flags["--speculative-eagle-topk"]
    assert topk["attr"] == "speculative_eagle_topk"
    assert topk["type"] == "int"
    assert topk["default_known"] and topk["default"] is None


def test_references_include_declaration_and_writes(kb: KnowledgeBase) -> None:
    refs = kb.store.refs("0.5.11", "speculative_eagle_topk")
    decl = [r for r in refs if r["kind"] == "declaration"]
    assert [(r["path"], r["line"]) for r in decl] == [(SA, 520)]
    writes = [r for r in refs if r["kind"] == "write" and r["path"] == SA]
    assert len(writes) >= 3
    auto = [w for w in writes if "auto_choose_speculative_params" in (w["value"] or "")]
    assert auto and auto[0]["line"] > 3519
    assert any(g["condition"] == "self.speculative_num_steps is None" for g in auto[0]["guards"])
    reads = [r for r in refs if r["kind"] == "read"]
    assert any(r["line"] == 3520 for r in reads)


def test_same_check_lives_in_the_speculative_hook_in_0_5_23(kb: KnowledgeBase) -> None:
    path = "sglang/srt/arg_groups/speculative_hook.py"
    checks = kb.store.checks("0.5.23", path=path, function="_handle_eagle_family")
    bare = [c for c in checks if c.bare and "speculative_eagle_topk is None" in (c.condition or "")]
    assert len(bare) == 1
    assert "cfg.speculative_num_draft_tokens is None" in bare[0].condition
    assert any("cfg.speculative_num_steps is None" in g["condition"] for g in bare[0].guards)
    refs = kb.store.refs("0.5.23", "speculative_eagle_topk")
    in_fn = [r for r in refs if r["path"] == path and r["function"] == "_handle_eagle_family"]
    assert {r["obj"] for r in in_fn if r["kind"] == "read"} >= {"cfg"}
    assert any(r["kind"] == "declare" for r in in_fn)
    fn = kb.store.function("0.5.23", "_handle_eagle_family", path)
    assert fn["start_line"] <= bare[0].start_line <= bare[0].end_line <= fn["end_line"]


def test_flag_catalog_of_0_5_23_has_over_500_flags(kb: KnowledgeBase) -> None:
    rel = kb.store.release("0.5.23")
    assert rel["flags"] >= 500
    spellings = {s for f in kb.store.flags("0.5.23") for s in f["flags"]}
    assert {"--speculative-eagle-topk", "--reasoning-parser", "--enable-dp-attention"} <= spellings


def test_counts_are_in_line_with_the_releases(kb: KnowledgeBase, ingest_reports: dict) -> None:
    for version in ("0.5.9", "0.5.11", "0.5.23"):
        rel = kb.store.release(version)
        assert rel["status"] in ("indexed", "complete")
        assert rel["files"] > 1000 and rel["functions"] > 10000 and rel["checks"] > 1000
    assert kb.store.release("0.5.11")["embedded_scope"] == "default"
    assert kb.store.release("0.5.9")["embedded_scope"] == "none"


def test_reingest_of_an_unchanged_release_is_a_no_op(kb: KnowledgeBase, sglang_source) -> None:
    # bring the shared KB to this code's state first (another checkout may share the cache)
    ingest(kb, sglang_source("0.5.11"), scope="default")
    before = kb.store.release("0.5.11")
    n_checks = len(kb.store.checks("0.5.11"))
    vectors_before = kb.vectors.count("0.5.11")
    report = ingest(kb, sglang_source("0.5.11"), scope="default")
    assert report.structure == "unchanged"
    assert (report.embedded, report.upserted) == (0, 0)
    after = kb.store.release("0.5.11")
    assert after["content_hash"] == before["content_hash"]
    assert after["ingested_at"] == before["ingested_at"]
    assert len(kb.store.checks("0.5.11")) == n_checks
    assert kb.vectors.count("0.5.11") == vectors_before
    in_scope_chunks = [
        r
        for r in kb.store.query("SELECT path FROM chunks WHERE release = '0.5.11'")
        if in_scope(r["path"], "default")
    ]
    assert vectors_before == len(in_scope_chunks)


def test_local_path_ingest_reads_the_version_from_metadata(sglang_source, tmp_path) -> None:
    src = read_local(sglang_source("0.5.9").root)
    assert src.version == "0.5.9" and src.origin.startswith("path:")


def test_dev_build_keeps_its_full_version_string(tmp_path) -> None:
    pkg = tmp_path / "python" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "version.py").write_text('__version__ = "0.5.19.dev410+gedff717ef"\n')
    (pkg / "srt" / "server_args.py").write_text(
        "class ServerArgs:\n    def check(self):\n        assert self.tp_size > 0\n"
    )
    src = read_local(tmp_path)
    assert src.version == "0.5.19.dev410+gedff717ef"


def _small_tree(full: Path, dest: Path, files: list[str]) -> Path:
    """A local sglang tree holding a few real files of a release (and its metadata)."""
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(full / rel, dest / rel)
    for meta in full.glob("sglang-*.dist-info"):
        shutil.copytree(meta, dest / meta.name)
    return dest


def test_interrupted_embedding_resumes_without_duplicates(
    kb_settings, sglang_source, tmp_path, monkeypatch
) -> None:
    settings = kb_settings.model_copy(update={"kb_dir": tmp_path / "kb"})
    small = KnowledgeBase(settings)
    tree = _small_tree(
        sglang_source("0.5.11").root,
        tmp_path / "src",
        [
            "sglang/launch_server.py",
            "sglang/srt/configs/load_config.py",
            "sglang/srt/configs/device_config.py",
            "sglang/srt/server_args_config_parser.py",
            "sglang/srt/configs/model_config.py",
        ],
    )
    src = read_local(tree)
    assert src.version == "0.5.11"
    report = index_structure(small, src)
    assert report.structure == "indexed"
    monkeypatch.setattr(small.embedder, "batch_size", 8)  # several encode calls
    real_encode = small.embedder.encode
    calls = {"n": 0}

    def dying_encode(texts, **kw):
        calls["n"] += 1
        if calls["n"] > 1:
            raise KeyboardInterrupt("killed mid-embedding")
        return real_encode(texts, **kw)

    monkeypatch.setattr(small.embedder, "encode", dying_encode)
    from ingest.pipeline import embed_release

    with pytest.raises(KeyboardInterrupt):
        embed_release(small, "0.5.11", "default", report)
    assert small.store.release("0.5.11")["embedded_scope"] == "none"
    monkeypatch.setattr(small.embedder, "encode", real_encode)
    resumed = ingest(small, src, scope="default")
    assert resumed.structure == "unchanged"
    assert resumed.reused > 0  # the first batch survived the interruption
    n_scope = sum(
        1
        for r in small.store.query("SELECT path FROM chunks WHERE release = '0.5.11'")
        if in_scope(r["path"], "default")
    )
    assert small.vectors.count("0.5.11") == n_scope
    assert small.store.release("0.5.11")["status"] == "complete"


def test_call_sites_are_stored_at_ingest(kb) -> None:
    """Call sites with their guards are found once at ingest (query time never parses):
    direct calls of a ``_handle_*`` step, and hooks run through ``run_hook(fn, ...)``."""
    store = kb.store
    sites = store.calls("0.5.11", "sglang/srt/server_args.py", "_handle_speculative_decoding")
    assert [s["caller"] for s in sites] == ["ServerArgs.__post_init__"]
    text = store.file_lines(
        "0.5.11", "sglang/srt/server_args.py", sites[0]["line"], sites[0]["line"]
    )
    assert "_handle_speculative_decoding(" in text[0]
    path = "sglang/srt/arg_groups/pipeline.py"
    hooks = [
        r
        for r in store.calls("0.5.23", path)
        if r["caller"] == "run_resolution_pipeline"
        and "run_hook(" in store.file_lines("0.5.23", path, r["line"], r["line"])[0]
    ]
    assert len(hooks) > 5, "run_resolution_pipeline runs its hooks through run_hook"
    for hook in hooks:
        line = store.file_lines("0.5.23", path, hook["line"], hook["line"])[0]
        assert line.split("run_hook(", 1)[1].lstrip().startswith(hook["callee"]), line
    assert all(isinstance(g["polarity"], bool) for r in hooks for g in r["guards"])
    # outside the validation files, only calls of the file's own functions are kept
    other = store.query(
        "SELECT DISTINCT path FROM calls WHERE release = '0.5.11' AND path NOT LIKE "
        "'sglang/srt/server_args.py' AND path NOT LIKE 'sglang/srt/arg_groups/%' "
        "LIMIT 20"
    )
    for row in other:
        own = {
            f["name"]
            for f in store.query(
                "SELECT name FROM functions WHERE release = '0.5.11' AND path = ?", (row["path"],)
            )
        }
        callees = {c["callee"] for c in store.calls("0.5.11", row["path"])}
        assert callees <= own, row["path"]
