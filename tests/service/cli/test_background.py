"""``serve --embed-defaults``: a child encodes, the serving process stores into its Chroma."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.pipeline import in_scope, index_structure
from kb.knowledge import KnowledgeBase
from kb.search import hybrid_search
from kb.sources import read_local
from service.cli.background import BackgroundFill, releases_to_embed
from tests.trees import release_tree

#: Real files of the validation surface (the default embedding scope), and one outside it.
FILES = (
    "sglang/launch_server.py",
    "sglang/srt/configs/device_config.py",
    "sglang/srt/configs/load_config.py",
    "sglang/srt/utils/common.py",
)


@pytest.fixture
def small_kb(tmp_path: Path, kb_settings, sglang_source):
    """A KB of its own holding a small release tree (0.0.1), indexed without embeddings."""
    src = sglang_source("0.5.9").root
    files = {rel: src / rel for rel in FILES}
    tree = release_tree(tmp_path / "tree", "0.0.1", files)
    settings = kb_settings.model_copy(
        update={
            "home": tmp_path / "home",
            "kb_dir": tmp_path / "kb",
            "releases": ["0.0.1"],
            "chroma_url": None,
        }
    )
    kb = KnowledgeBase(settings)
    index_structure(kb, read_local(tree))
    yield settings, kb
    kb.close()


def test_a_child_encodes_and_the_serving_process_stores_the_vectors(small_kb) -> None:
    settings, kb = small_kb
    assert releases_to_embed(kb, ["0.0.1", "9.9.9"]) == ["0.0.1"]  # 9.9.9: not indexed
    before = hybrid_search(kb, "load format", "0.0.1")
    assert before.degraded and "no embeddings" in before.degraded
    kb.vectors.count("0.0.1")  # this process owns the embedded Chroma from here on

    fill = BackgroundFill(settings, embed=True, atlas_since=None)
    fill.start()
    fill.join(timeout=600)
    assert not fill.is_alive() and fill.failed == {}

    report = fill.embedded["0.0.1"]
    in_surface = [
        r["id"]
        for r in kb.store.query("SELECT id, path FROM chunks WHERE release = '0.0.1'")
        if in_scope(r["path"], "default")
    ]
    assert in_surface  # the tree holds validation-surface code
    # the child encoded every vector; storing them here encoded none
    assert (report.embedded, report.reused, report.upserted) == (
        0,
        len(in_surface),
        len(in_surface),
    )
    assert kb.vectors.count("0.0.1") == len(in_surface)
    assert kb.store.require("0.0.1")["embedded_scope"] == "default"
    after = hybrid_search(kb, "load format", "0.0.1")
    assert after.degraded is None and "dense" in after.modes
    logged = fill.log_path.read_text()
    assert fill.log_path.parent == settings.home
    assert "$ sglang-triage ingest --path" in logged and "--vectors-only" in logged
    assert f"embedded {len(in_surface)} new" in logged  # the child's own report
    assert releases_to_embed(kb, ["0.0.1"]) == []  # a second start has nothing to do


def test_a_failed_child_leaves_keyword_search_and_says_so(small_kb, tmp_path) -> None:
    settings, kb = small_kb
    kb.store.set_release_fields("0.0.1", origin=f"path:{tmp_path / 'gone'}")
    fill = BackgroundFill(settings, embed=True, atlas_since=None)
    fill.start()
    fill.join(timeout=600)
    assert "exited with status 2" in fill.failed["0.0.1"] and fill.embedded == {}
    assert "no sglang package" in fill.log_path.read_text()  # the child said why
    assert kb.store.require("0.0.1")["embedded_scope"] == "none"


def test_vectors_only_is_refused_with_all(tmp_path, monkeypatch) -> None:
    """``--all`` embeds through its own batch path, into Chroma: the two do not combine."""
    from typer.testing import CliRunner

    from service.cli.main import app

    monkeypatch.setenv("TRIAGE_KB_DIR", str(tmp_path / "kb"))
    result = CliRunner().invoke(app, ["ingest", "--all", "--vectors-only"])
    assert result.exit_code == 2
    assert "--vectors-only goes with" in " ".join(result.output.split())
