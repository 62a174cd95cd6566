"""``sglang-triage atlas``: releases into the atlas from the wheel cache, a summary that
says what was added, and a usage error without a release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kb.atlas import ATLAS_FILE, Atlas
from service.cli.main import app


def test_a_release_is_added_once_and_its_wheel_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_settings, sglang_source
) -> None:
    sglang_source("0.5.5")  # its wheel in the cache
    monkeypatch.setenv("TRIAGE_KB_DIR", str(tmp_path / "kb"))
    monkeypatch.setenv("TRIAGE_HOME", str(cache_settings.home))
    first = CliRunner().invoke(app, ["atlas", "--release", "0.5.5", "--json"])
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    assert summary["added"] == ["0.5.5"] and summary["releases"] == 1 and summary["bytes"] > 0
    again = json.loads(CliRunner().invoke(app, ["atlas", "-r", "0.5.5", "--json"]).stdout)
    assert again["added"] == [] and again["present"] == ["0.5.5"]
    assert Atlas(tmp_path / "kb" / ATLAS_FILE).releases() == ["0.5.5"]
    assert list(cache_settings.wheel_dir.glob("sglang-0.5.5-*.whl"))


def test_nothing_to_add_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAGE_KB_DIR", str(tmp_path / "kb"))
    result = CliRunner().invoke(app, ["atlas"])
    assert result.exit_code == 2 and "give --release or --since" in result.output
