"""``ingest --all`` against a local package index that pip really downloads from.

The index (PEP 503 HTML, a ``file://`` folder) offers the real 0.5.9 wheel, a
wheel without ``sglang/srt/server_args.py`` (as the oldest releases are), a
yanked release and a listed file that does not exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from ingest.acquire.batch import ingest_all, scope_for
from kb.knowledge import KnowledgeBase
from kb.sources import ReleaseSource, find_wheel
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[3]


def _wheel_without_server_args(folder: Path, version: str) -> Path:
    wheel = folder / f"sglang-{version}-py3-none-any.whl"
    info = f"sglang-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", f'__version__ = "{version}"\n')
        zf.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
        )
        zf.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def _index(tmp_path: Path, real_wheel: Path) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    old = _wheel_without_server_args(files, "0.0.1")
    real = files / real_wheel.name
    real.write_bytes(real_wheel.read_bytes())
    links = [
        f'<a href="{old.as_uri()}">{old.name}</a>',
        f'<a href="{(files / "sglang-0.0.2-py3-none-any.whl").as_uri()}" '
        f'data-yanked="bad upload">sglang-0.0.2-py3-none-any.whl</a>',
        f'<a href="{(files / "sglang-0.0.3-py3-none-any.whl").as_uri()}">'
        f"sglang-0.0.3-py3-none-any.whl</a>",
        f'<a href="{real.as_uri()}">{real.name}</a>',
    ]
    index = tmp_path / "simple"
    (index / "sglang").mkdir(parents=True)
    (index / "sglang" / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    return index


def test_scope_for_embeds_only_default_releases(cache_settings: Settings) -> None:
    settings = cache_settings.model_copy(update={"releases": ["0.5.11"]})
    assert scope_for("0.5.11", settings, "default") == "default"
    assert scope_for("0.5.12", settings, "full") == "none"


def test_ingest_all_ingests_what_it_can_and_says_why_not(
    cache_settings: Settings, sglang_source: Callable[[str], ReleaseSource], tmp_path: Path
) -> None:
    sglang_source("0.5.9")
    wheel = find_wheel(cache_settings.wheel_dir, "0.5.9")
    assert wheel is not None
    index = _index(tmp_path, wheel)
    settings = cache_settings.model_copy(
        update={
            "home": tmp_path / "home",
            "kb_dir": tmp_path / "kb",
            "chroma_url": None,
            "pip_index_url": index.as_uri(),
            "releases": [],
        }
    )
    kb = KnowledgeBase(settings)
    seen: list[str] = []
    try:
        result = ingest_all(
            kb,
            settings,
            since="0.0.1",
            scope="default",
            on_release=lambda o: seen.append(o.version),
        )
    finally:
        kb.close()
    assert [r.version for r in result.reports] == ["0.5.9"]
    assert result.reports[0].structure == "indexed" and result.reports[0].scope == "none"
    reasons = {s.version: s.reason for s in result.skipped}
    assert reasons["0.0.2"] == "yanked: bad upload"
    assert reasons["0.0.1"].startswith("no sglang/srt/server_args.py in pypi:sglang-0.0.1")
    assert reasons["0.0.3"].startswith("cannot be fetched: pip could not download sglang==0.0.3")
    assert result.listed == 4 and seen == ["0.0.2", "0.0.1", "0.0.3", "0.5.9"]

    # the CLI, a second time: 0.5.9 is unchanged, and the table and --json say what was skipped
    env = {
        **os.environ,
        "TRIAGE_HOME": str(tmp_path / "home"),
        "TRIAGE_KB_DIR": str(tmp_path / "kb"),
        "TRIAGE_PIP_INDEX_URL": index.as_uri(),
        "TRIAGE_RELEASES": "[]",
        "COLUMNS": "200",
    }
    env.pop("TRIAGE_CHROMA_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "ingest", "--all", "--since", "0.0.2", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert [(r["version"], r["structure"]) for r in payload["releases"]] == [("0.5.9", "unchanged")]
    assert [s["version"] for s in payload["skipped"]] == ["0.0.2", "0.0.3"]
    assert "2 skipped of 3 listed" in proc.stderr and "bad upload" in proc.stderr


def test_cli_refuses_a_dev_build_without_the_git_setting(tmp_path: Path) -> None:
    env = {**os.environ, "TRIAGE_HOME": str(tmp_path), "TRIAGE_KB_DIR": str(tmp_path / "kb")}
    env.pop("TRIAGE_SGLANG_GIT", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli.main",
            "ingest",
            "--release",
            "0.5.19.dev410+gedff717ef",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "TRIAGE_SGLANG_GIT" in proc.stderr and "edff717ef" in proc.stderr
