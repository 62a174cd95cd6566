"""``sglang-triage serve``'s refusals, through the real command line (typer's runner)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli.main import app


def test_several_workers_on_the_embedded_chroma_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIAGE_CHROMA_URL", raising=False)
    monkeypatch.setenv("TRIAGE_KB_DIR", str(tmp_path / "kb"))
    result = CliRunner().invoke(app, ["serve", "--workers", "2", "--port", "1"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--workers 2 needs a Chroma server" in said
    assert "chroma run" in said and "TRIAGE_CHROMA_URL" in said and "--workers 1" in said


def test_zero_workers_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(app, ["serve", "--workers", "0"])
    assert result.exit_code == 2 and "workers" in result.output.lower()
