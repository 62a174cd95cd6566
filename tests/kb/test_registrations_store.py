"""``Store.registrations``: what a release registers, from a small ingested tree and from
the session KB's real releases; and an index of schema 4 migrating to schema 5."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ingest.pipeline import index_structure
from kb.knowledge import KnowledgeBase
from kb.sources import read_local
from kb.store import SCHEMA_VERSION, Store
from tests.trees import release_tree

MOE = "sglang/srt/layers/moe/moe_runner/"
RUNNER = MOE + "triton.py"
CUTEDSL = MOE + "flashinfer_cutedsl.py"
QUANT = "sglang/srt/layers/quantization/__init__.py"

TRITON = """\
from sglang.srt.layers.moe.moe_runner.base import register_fused_func


@register_fused_func("none", "triton")
def fused_experts_none_to_triton(dispatch_output, quant_info, runner_config):
    return dispatch_output
"""
CUTEDSL_V1 = """\
from sglang.srt.layers.moe.moe_runner.base import register_fused_func


@register_fused_func("none", "flashinfer_cutedsl")
def fused_none(dispatch_output, quant_info, runner_config):
    return dispatch_output
"""
CUTEDSL_V2 = (
    CUTEDSL_V1
    + """

@register_fused_func("deepep", "flashinfer_cutedsl")
def fused_deepep(dispatch_output, quant_info, runner_config):
    return dispatch_output
"""
)
DEEPEP_LINE = (
    CUTEDSL_V2.splitlines().index('@register_fused_func("deepep", "flashinfer_cutedsl")') + 1
)
QUANTIZATION = """\
QUANTIZATION_METHODS = {
    "fp8": Fp8Config,
    "awq": AWQConfig,
}
"""

ROW_KEYS = {"registry", "keys", "target", "path", "line", "kind"}


def _tree(dest: Path, version: str, cutedsl: str) -> Path:
    return release_tree(dest, version, {RUNNER: TRITON, CUTEDSL: cutedsl, QUANT: QUANTIZATION})


@pytest.fixture()
def small_kb(kb_settings, tmp_path):
    kb = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path / "kb"}))
    yield kb
    kb.close()


def test_registrations_are_read_by_registry_and_key_in_path_order(small_kb, tmp_path) -> None:
    report = index_structure(small_kb, read_local(_tree(tmp_path / "a", "0.0.1", CUTEDSL_V2)))
    store = small_kb.store
    rows = store.registrations("0.0.1")
    assert report.registrations == len(rows) == 5
    assert all(set(r) == ROW_KEYS for r in rows)
    assert [(r["path"], r["line"]) for r in rows] == sorted((r["path"], r["line"]) for r in rows)
    fused = store.registrations("0.0.1", registry="register_fused_func")
    assert fused == [
        {
            "registry": "register_fused_func",
            "keys": ["none", "flashinfer_cutedsl"],
            "target": "fused_none",
            "path": CUTEDSL,
            "line": 4,
            "kind": "decorator",
        },
        {
            "registry": "register_fused_func",
            "keys": ["deepep", "flashinfer_cutedsl"],
            "target": "fused_deepep",
            "path": CUTEDSL,
            "line": DEEPEP_LINE,
            "kind": "decorator",
        },
        {
            "registry": "register_fused_func",
            "keys": ["none", "triton"],
            "target": "fused_experts_none_to_triton",
            "path": RUNNER,
            "line": 4,
            "kind": "decorator",
        },
    ]
    # a key matches whole keys, whatever their case (a crash prints enum names)
    assert [r["target"] for r in store.registrations("0.0.1", key="DEEPEP")] == ["fused_deepep"]
    assert store.registrations("0.0.1", key="deep") == []
    assert [
        (r["keys"], r["target"], r["kind"])
        for r in store.registrations("0.0.1", registry="QUANTIZATION_METHODS")
    ] == [(["fp8"], "Fp8Config", "dict"), (["awq"], "AWQConfig", "dict")]
    assert store.registrations("0.0.1", registry="QUANTIZATION_METHODS", key="triton") == []
    assert store.registrations("9.9.9") == []


def test_a_linked_file_keeps_its_registrations_in_every_release(small_kb, tmp_path) -> None:
    store = small_kb.store
    index_structure(small_kb, read_local(_tree(tmp_path / "a", "0.0.1", CUTEDSL_V1)))
    report = index_structure(small_kb, read_local(_tree(tmp_path / "b", "0.0.2", CUTEDSL_V2)))
    assert report.reused_files == 2  # triton.py and the quantization methods are linked
    assert report.registrations == len(store.registrations("0.0.2")) == 5
    assert store.registrations("0.0.1", key="deepep") == []
    assert [r["line"] for r in store.registrations("0.0.2", key="deepep")] == [DEEPEP_LINE]
    for version in ("0.0.1", "0.0.2"):
        assert [r["path"] for r in store.registrations(version, key="triton")] == [RUNNER]
    store.delete_release("0.0.1")  # the shared units stay for 0.0.2
    assert len(store.registrations("0.0.2")) == 5
    assert store.query("SELECT COUNT(*) FROM unit_registrations")[0][0] == 5


def _as_schema_4(path: Path) -> None:
    """Turn a schema-5 index back into schema 4: no registrations table, no view."""
    con = sqlite3.connect(path)
    con.executescript(
        "DROP VIEW registrations; DROP TABLE unit_registrations; "
        "UPDATE meta SET value = '4' WHERE key = 'schema_version';"
    )
    con.commit()
    con.close()


def test_a_schema_4_index_migrates_keeping_its_rows(small_kb, kb_settings, tmp_path) -> None:
    source = read_local(_tree(tmp_path / "a", "0.0.1", CUTEDSL_V2))
    index_structure(small_kb, source)
    path = small_kb.store.path
    count = lambda store, table: store.query(  # noqa: E731
        f"SELECT COUNT(*) FROM {table} WHERE release = '0.0.1'"
    )[0][0]
    before = {t: count(small_kb.store, t) for t in ("files", "functions", "chunks", "checks")}
    release = small_kb.store.release("0.0.1")
    small_kb.close()
    _as_schema_4(path)

    store = Store(path)
    assert (
        store.query("SELECT value FROM meta WHERE key = 'schema_version'")[0][0]
        == str(SCHEMA_VERSION)
        == "5"
    )
    assert {t: count(store, t) for t in before} == before
    assert store.release("0.0.1") == release  # content hash kept: nothing else changed
    assert store.registrations("0.0.1") == []  # until the release is indexed again
    assert store.fts("fused deepep", "0.0.1")
    Store(path).close()  # a second opener finds the work done
    store.close()
    # the next ingest re-indexes (in real life because the extraction code changed the
    # code fingerprint; here the code is the same, so it is forced) and the rows appear
    kb = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": path.parent}))
    try:
        index_structure(kb, source, force=True)
        assert len(kb.store.registrations("0.0.1")) == 5
    finally:
        kb.close()


def _line(store: Store, version: str, row: dict) -> str:
    return store.file_lines(version, row["path"], row["line"], row["line"])[0].strip()


def test_the_session_kb_holds_the_fused_funcs_of_0_5_23(store) -> None:
    """Real registrations of 0.5.23 (``sglang/srt/layers/moe/moe_runner/*.py``): the MoE
    runner's fused funcs, keyed by (a2a backend, runner backend), each row pointing at
    its decorator line."""
    fused = store.registrations("0.5.23", registry="register_fused_func")
    by_keys = {tuple(r["keys"]): r for r in fused if r["path"].startswith(MOE)}
    trtllm = by_keys[("none", "flashinfer_trtllm")]
    cutedsl = by_keys[("deepep", "flashinfer_cutedsl")]
    assert (trtllm["path"], trtllm["target"], trtllm["kind"]) == (
        MOE + "flashinfer_trtllm.py",
        "fused_experts_none_to_flashinfer_trtllm",
        "decorator",
    )
    assert (cutedsl["path"], cutedsl["target"]) == (
        CUTEDSL,
        "fused_experts_deepep_to_flashinfer_cutedsl_fp4",
    )
    for row in (trtllm, cutedsl):
        assert (
            _line(store, "0.5.23", row)
            == f'@register_fused_func("{row["keys"][0]}", "{row["keys"][1]}")'
        )
    # the fused funcs 0.5.23 registers for the deepep a2a backend: only cutedsl's
    # (the docstring of flashinfer_cutedsl.py that quotes the decorator is not one)
    deepep = store.registrations("0.5.23", registry="register_fused_func", key="deepep")
    assert [(r["path"], r["keys"]) for r in deepep] == [(CUTEDSL, ["deepep", "flashinfer_cutedsl"])]
    assert ("none", "triton") in by_keys
