"""The diffusion server's flags: extracted apart from the LLM server's, stored, read back."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ingest.catalog import DIFFUSION_FILES, extract_catalog
from kb.catalog_types import Catalog, FlagSpec
from kb.catalogs import load_catalog
from kb.store import Store

_LITERAL_FLAG = re.compile(r"""add_argument\(\s{0,200}["'](--[\w-]{1,100})["']""")


@pytest.fixture(scope="module")
def cat_0523(sglang_source) -> Catalog:
    return extract_catalog(sglang_source("0.5.23").package_dir)


def _declared(package_dir: Path) -> set[str]:
    """First spellings of literal ``add_argument("--x", ...)`` calls in the diffusion files."""
    found: set[str] = set()
    for rel in DIFFUSION_FILES:
        p = package_dir / rel
        files = (
            sorted(p.rglob("*.py"))
            if rel.endswith("/") and p.is_dir()
            else [p]
            if p.is_file()
            else []
        )
        for f in files:
            found.update(_LITERAL_FLAG.findall(f.read_text(encoding="utf-8", errors="replace")))
    return found


def test_diffusion_flags_are_kept_apart(cat_0523: Catalog, sglang_source) -> None:
    root = sglang_source("0.5.23").root
    assert cat_0523.diffusion, "0.5.23 ships sglang/multimodal_gen"
    for spec in cat_0523.diffusion:
        assert spec.path.startswith("sglang/multimodal_gen/"), spec.path
        text = (root / spec.path).read_text(encoding="utf-8").splitlines()
        window = "\n".join(text[spec.line - 1 : spec.line + 3])
        assert "add_argument" in window and spec.flags[0] in window, (spec.path, spec.line)
    for spec in cat_0523.flags:
        assert "multimodal_gen" not in spec.path, spec.path
    llm, diff = cat_0523.by_flag(), cat_0523.diffusion_catalog().by_flag()
    assert "--model-path" in llm and "--model-path" in diff  # both servers take the model
    assert set(diff) - set(llm), "the diffusion server has flags of its own"
    assert set(llm) - set(diff), "and the LLM server flags the diffusion one lacks"


def test_every_literal_diffusion_flag_is_extracted(cat_0523: Catalog, sglang_source) -> None:
    declared = _declared(sglang_source("0.5.23").package_dir)
    extracted = set(cat_0523.diffusion_catalog().by_flag())
    assert len(declared) >= 50
    assert declared <= extracted, sorted(declared - extracted)[:10]


def _has_diffusion_server(store, rel: str) -> bool:
    """Whether ``rel`` ships the diffusion server (``sglang/multimodal_gen``; 0.4.x does not)."""
    return bool(
        store.query(
            "SELECT 1 FROM files WHERE release = ? AND path LIKE 'sglang/multimodal_gen/%' LIMIT 1",
            (rel,),
        )
    )


def test_the_session_kb_stores_the_diffusion_flags(store) -> None:
    with_it = [r["version"] for r in store.releases() if _has_diffusion_server(store, r["version"])]
    assert len(with_it) >= 6
    for rel in (r["version"] for r in store.releases()):
        cat = load_catalog(store, rel)
        if rel not in with_it:  # no diffusion parser: no diffusion flags
            assert cat.diffusion == [], rel
            continue
        assert cat.diffusion, rel
        assert cat.diffusion_catalog() is cat.diffusion_catalog()  # built once per catalog
        spellings = {
            r["spelling"]
            for r in store.query("SELECT spelling FROM flag_spellings WHERE release = ?", (rel,))
        }
        only_diffusion = set(cat.diffusion_catalog().by_flag()) - set(cat.by_flag())
        assert only_diffusion and not (only_diffusion & spellings), (
            rel
        )  # the LLM index never has them


def test_a_catalog_stored_before_diffusion_flags_reads_as_none(store, tmp_path: Path) -> None:
    """A KB indexed by older code has no ``diffusion`` key in its catalog document."""
    rel = next(r for r in store.releases() if r["version"] == "0.5.11")
    old = tmp_path / "index.sqlite"
    copy = Store(old)
    data = store.catalog_json("0.5.11")
    data.pop("diffusion")
    with copy.transaction() as con:
        con.execute(
            "INSERT INTO releases (version, origin, content_hash, status) VALUES (?, ?, ?, ?)",
            ("0.5.11", rel["origin"], rel["content_hash"] + "-old", "indexed"),
        )
        con.execute("INSERT INTO catalogs VALUES (?, ?)", ("0.5.11", json.dumps(data)))
    cat = load_catalog(copy, "0.5.11")
    assert cat.diffusion == [] and cat.diffusion_catalog().by_flag() == {}
    assert len(cat.flags) == len(load_catalog(store, "0.5.11").flags)


def test_catalog_round_trips_through_json(cat_0523: Catalog) -> None:
    data = json.loads(json.dumps(dataclasses.asdict(cat_0523), default=repr))
    back = [FlagSpec(**f) for f in data["diffusion"]]
    assert [s.flags for s in back] == [s.flags for s in cat_0523.diffusion]
