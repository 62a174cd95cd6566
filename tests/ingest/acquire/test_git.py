"""Dev builds from git: a local bare repository built from two real releases' sources."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest.acquire import fetch_any
from ingest.acquire.git import (
    DevBuildNeedsGit,
    GitFetchError,
    dev_commit,
    mirror_dir,
    public_url,
)
from ingest.pipeline import ingest
from kb.errors import ConfigError, TriageError
from kb.knowledge import KnowledgeBase
from kb.sources import ReleaseSource
from service.settings import Settings

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.test", "-c", "commit.gpgsign=false"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _py_files(package_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(package_dir)): p.read_bytes()
        for p in sorted(package_dir.rglob("*.py"))
        if p.is_file()
    }


def _commit_release(work: Path, src: ReleaseSource) -> str:
    """Replace ``python/sglang`` in ``work`` by ``src``'s Python files and commit them."""
    target = work / "python" / "sglang"
    shutil.rmtree(target, ignore_errors=True)
    for rel, blob in _py_files(src.package_dir).items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(blob)
    (work / "README.md").write_text(f"sglang {src.version}\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", f"release {src.version}")
    return _git(work, "rev-parse", "HEAD")


def test_dev_versions_name_commits() -> None:
    assert dev_commit("0.5.19.dev410+gedff717ef") == "edff717ef"
    assert dev_commit("0.5.19.dev410+gedff717ef.d20250101") == "edff717ef"
    assert dev_commit("0.5.19") is None
    assert dev_commit("0.5.19.dev410") is None
    assert dev_commit("0.5.19+gedff717ef") is None
    assert (
        public_url("https://user:tok@github.com/sgl-project/sglang.git")
        == "https://github.com/sgl-project/sglang.git"
    )


def test_dev_build_without_the_setting_names_it(cache_settings: Settings, tmp_path: Path) -> None:
    settings = cache_settings.model_copy(update={"home": tmp_path, "sglang_git": None})
    with pytest.raises(DevBuildNeedsGit, match="TRIAGE_SGLANG_GIT") as info:
        fetch_any("0.5.19.dev410+gedff717ef", settings)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, TriageError)
    assert info.value.details["commit"] == "edff717ef"
    assert not (tmp_path / "git").exists()


def test_settings_make_a_local_mirror_path_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRIAGE_SGLANG_GIT", "mirror.git")
    assert Settings().sglang_git == str(tmp_path / "mirror.git")
    monkeypatch.setenv("TRIAGE_SGLANG_GIT", "https://github.com/sgl-project/sglang.git")
    assert Settings().sglang_git == "https://github.com/sgl-project/sglang.git"


def test_dev_builds_fetch_their_exact_commit_and_ingest(
    cache_settings: Settings, sglang_source: Callable[[str], ReleaseSource], tmp_path: Path
) -> None:
    old, new = sglang_source("0.5.9"), sglang_source("0.5.11")
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    sha_old = _commit_release(work, old)
    upstream = tmp_path / "upstream.git"
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(upstream))
    settings = cache_settings.model_copy(
        update={
            "home": tmp_path / "home",
            "kb_dir": tmp_path / "kb",
            "chroma_url": None,
            "sglang_git": str(upstream),
            "releases": [],
        }
    )

    v_old = f"0.5.10.dev3+g{sha_old[:9]}"
    src_old = fetch_any(v_old, settings)
    assert src_old.version == v_old
    assert src_old.origin == f"git:{upstream}@{sha_old}"
    assert src_old.root == settings.source_dir / f"git-{sha_old}"
    assert _py_files(src_old.package_dir) == _py_files(old.package_dir)

    # the second commit exists upstream only after the mirror was made: it is fetched then
    sha_new = _commit_release(work, new)
    _git(work, "push", "-q", str(upstream), "main")
    mirror = mirror_dir(settings.home, str(upstream))
    assert (
        subprocess.run(
            ["git", "cat-file", "-e", sha_new], cwd=mirror, capture_output=True
        ).returncode
        != 0
    )
    src_new = fetch_any(f"0.5.12.dev1+g{sha_new[:12]}", settings)
    assert _py_files(src_new.package_dir) == _py_files(new.package_dir)
    assert _py_files(src_new.package_dir) != _py_files(src_old.package_dir)

    with pytest.raises(GitFetchError, match="not on any branch or tag"):
        fetch_any("0.5.12.dev2+gdeadbeef1", settings)

    kb = KnowledgeBase(settings)
    try:
        report = ingest(kb, src_old, scope="none")
        assert report.structure == "indexed"
        row = kb.store.release(v_old)
        assert row is not None and row["status"] in ("indexed", "complete")
        assert row["origin"] == src_old.origin
        checks = kb.store.query(
            "SELECT COUNT(*) AS n FROM checks WHERE release = ? AND path = ?",
            (v_old, "sglang/srt/server_args.py"),
        )
        assert checks[0]["n"] > 20
        assert ingest(kb, fetch_any(v_old, settings), scope="none").structure == "unchanged"
    finally:
        kb.close()
