"""``sglang-triage lint --from FILE`` on the session KB: each example kind, a failing command,
variables left open, files with no command, the release it lints against, and one real process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli.commands_from import extract
from service.cli.main import app
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "examples" / "deploy"
WITH_COMMANDS = [
    DEPLOY / "systemd" / "sglang.service",
    DEPLOY / "systemd" / "sglang-run.service",
    DEPLOY / "kubernetes" / "sglang.yaml",
    DEPLOY / "compose" / "compose.yaml",
    DEPLOY / "slurm" / "sglang.sbatch",
]
#: the 0.5.11 seed: EAGLE3 with topk 4 and 8 draft tokens, no --speculative-num-steps
SEED = (
    "--model-path /models/Kimi-K2.6 --tp 8 --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path /d --speculative-eagle-topk 4 "
    "--speculative-num-draft-tokens 8"
)
BAD_UNIT = f"""\
# SGLang from lmsysorg/sglang:v0.5.11-cu129
[Service]
Environment=MODEL=/models/Kimi-K2.6
ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server \\
    {SEED}
"""


@pytest.fixture
def kb_env(kb, kb_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The CLI reads the session KB (never changed here), with no ingest and no fix search."""
    monkeypatch.setenv("TRIAGE_KB_DIR", str(kb_settings.kb_path))
    monkeypatch.setenv("TRIAGE_ON_DEMAND_INGEST", "false")
    monkeypatch.setenv("TRIAGE_FIX_SEARCH_DEADLINE_S", "0")
    monkeypatch.delenv("TRIAGE_CHROMA_URL", raising=False)
    return kb_settings


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["lint", *args])
    return result.exit_code, result.stdout, result.output


def test_every_example_kind_lints_clean_on_the_release_it_names(kb_env: Settings) -> None:
    dropin = DEPLOY / "systemd" / "sglang.service.d" / "10-preflight.conf"
    args = [a for f in WITH_COMMANDS for a in ("--from", str(f))]
    code, stdout, output = _run(*args, str(dropin), "--skip-empty", "--json")
    assert code == 0, output
    entries = json.loads(stdout)
    expected = [(str(f), c.line) for f in WITH_COMMANDS for c in extract(f).commands]
    assert [(e["file"], e["line"]) for e in entries] == expected
    assert {e["kind"] for e in entries} == {"systemd", "kubernetes", "compose", "slurm"}
    for e in entries:
        assert e["ok"] and e["release"] == "0.5.11", e
        assert e["release_source"].startswith("from the file: 0.5.11"), e
        report = e["report"]
        assert report["unknown_flags"] == [] and report["parse_errors"] == [], e
        assert report["argv"] == e["argv"] and "--model-path" in e["argv"]
    # the drop-in holds no launch command: said, and skipped
    assert f"{dropin}: no SGLang launch command found" in " ".join(output.split())


def test_a_failing_command_exits_1_with_its_file_line_and_a_checked_fix(
    kb_env: Settings, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.service"
    bad.write_text(BAD_UNIT)
    code, stdout, _ = _run("--from", str(bad))
    assert code == 1
    lines = stdout.splitlines()
    assert lines[0] == f"{bad}:4  (systemd, ExecStart)"
    assert lines[1].startswith(
        "release 0.5.11: from the file: 0.5.11 (image tag lmsysorg/sglang:v0.5.11-cu129, line 1)"
    )
    text = " ".join(stdout.split())
    assert "✗ error" in text and "fix (verified" in text and "would fail" in text
    assert (
        "SGLang 0.5.11, model KimiK25ForConditionalGeneration: /opt/sglang/bin/python3 -m "
        "sglang.launch_server --model-path /models/Kimi-K2.6" in text
    )
    # with a good file too: 1 still, and --json lists both commands
    code, stdout, _ = _run("--from", str(bad), "--from", str(WITH_COMMANDS[0]), "--json")
    assert code == 1
    assert [(e["ok"], e["line"]) for e in json.loads(stdout)] == [(False, 4), (True, 17)]


def test_variables_left_open_are_reported_not_flagged(kb_env: Settings, tmp_path: Path) -> None:
    script = tmp_path / "start.sh"
    script.write_text(
        "MODEL=/models/Qwen3-32B\nexport HF_TOKEN=secret\n"
        'exec python3 -m sglang.launch_server --model-path "$MODEL" --tp "$TP" '
        '--port ${PORT:-30000} "$@"\n'
    )
    code, stdout, output = _run("--from", str(script), "--release", "0.5.11")
    assert code == 0, output
    assert "left as written: $TP, $@ (the file does not say their value" in stdout
    assert "assumed: ${PORT:-30000} read as '30000'" in stdout
    assert "unknown flag" not in stdout and "invalid int value" not in stdout
    code, stdout, _ = _run("--from", str(script), "--release", "0.5.11", "--json")
    (entry,) = json.loads(stdout)
    assert entry["argv"] == [
        "--model-path",
        "/models/Qwen3-32B",
        "--tp",
        "$TP",
        "--port",
        "30000",
        "$@",
    ]
    assert entry["unresolved"] == ["$TP", "$@"] and entry["report"]["unknown_flags"] == []
    assert entry["report"]["command"].endswith("--tp $TP --port 30000 $@")  # not '$TP'
    assert entry["env"] == {"HF_TOKEN": "<redacted>"}
    assert entry["release_source"] == "as asked (--release)"


def test_a_file_without_a_launch_command(kb_env: Settings, tmp_path: Path) -> None:
    empty = tmp_path / "backup.sh"
    empty.write_text("#!/bin/sh\n# sglang serve --tp 2 (commented out)\nrsync -a /a /b\n")
    code, _, output = _run("--from", str(empty))
    said = " ".join(output.split())
    assert code == 2 and f"error: {empty}: no SGLang launch command found (read as shell" in said
    code, _, output = _run("--skip-empty", "--from", str(empty))
    assert code == 0 and "skipped" in output
    code, _, output = _run("--from", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in output


def test_release_choice_and_pre_commit_arguments(kb_env: Settings, tmp_path: Path) -> None:
    plain = tmp_path / "serve.sh"
    plain.write_text("sglang serve --model-path Qwen/Qwen3-8B --tp 2\n")
    code, stdout, _ = _run("--from", str(plain), "--json")
    (entry,) = json.loads(stdout)
    assert code == 0 and entry["release"] == "0.5.23"  # the newest the session KB holds
    assert entry["release_source"].startswith("assumed: the file names no release")
    # pre-commit appends the hook's args after the entry ("… --from"), then the file names
    pinned = tmp_path / "pinned.sh"
    pinned.write_text('pip install "sglang==0.5.23"\nsglang serve --model-path /models/m\n')
    code, stdout, _ = _run(
        "--skip-empty", "--from", "--release", "0.5.11", str(plain), str(pinned), "--json"
    )
    got = json.loads(stdout)
    assert code == 0 and [e["release"] for e in got] == ["0.5.11", "0.5.11"]
    assert "the file names 0.5.23 (pinned sglang==0.5.23, line 1)" in got[1]["release_source"]
    code, _, output = _run("--from", str(plain), "--release", "0.4.0")
    assert code == 2 and "release 0.4.0 is not in the KB" in " ".join(output.split())
    code, _, output = _run("--from", str(plain), "--tp", "8")
    assert code == 2 and "--from takes files, not launch flags: --tp" in output
    code, _, output = _run()
    assert code == 2 and "--from FILE" in output


def test_real_process(kb_env: Settings, tmp_path: Path) -> None:
    bad = tmp_path / "bad.service"
    bad.write_text(BAD_UNIT)
    env = {
        **os.environ,
        "TRIAGE_KB_DIR": str(kb_env.kb_path),
        "TRIAGE_HOME": str(kb_env.home),
        "TRIAGE_ON_DEMAND_INGEST": "false",
        "TRIAGE_FIX_SEARCH_DEADLINE_S": "0",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("TRIAGE_CHROMA_URL", None)
    exe = Path(sys.executable).with_name("sglang-triage")
    k8s = DEPLOY / "kubernetes" / "sglang.yaml"
    proc = subprocess.run(
        [str(exe), "lint", "--from", str(k8s), "--from", str(bad)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    heads = [line for line in proc.stdout.splitlines() if line.startswith((str(k8s), str(bad)))]
    assert heads == [
        f"{k8s}:43  (kubernetes, Deployment/sglang container server)",
        f"{bad}:4  (systemd, ExecStart)",
    ]
    assert "would fail: 2 launch command(s) in 2 file(s), 1 would fail" in proc.stdout
