"""``sglang-triage run``: real launches of a small ``sglang`` distribution in a venv (its
``dist-info`` says the release, its ``sglang.launch_server`` prints a recorded start-up
crash), a real ``nvidia-smi`` script on ``PATH`` printing recorded output, the suite's KB.
One end-to-end run of the real command line; the rest call the use case in process."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from service.engine import Engine
from service.settings import Settings
from service.watch.run import RunOptions, flags_of, run
from tests.service.watch.test_facts import RTX_CSV, fake_sglang, smi_env, tool

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "seed_attempt1.log"
#: the seed's launch flags (an error card of 0.5.11 is violated by them)
FLAGS = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/Kimi-K2.6-eagle3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]
CRASH = f"""\
import os, sys
open(os.environ["RUN_MARKER"], "w").write("launched")
os.write(1, b"stdout of the launch\\n")
os.write(2, open({str(SEED)!r}, "rb").read())
sys.exit(1)
"""


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A venv with sglang 0.5.11 whose launch crashes like the seed, and ``nvidia-smi``."""
    root = tmp_path_factory.mktemp("run-machine")
    python = fake_sglang(root / "venv", "0.5.11", CRASH)
    tool(root / "bin", "nvidia-smi", f"cat <<EOF\n{RTX_CSV}EOF\n")
    return {"python": str(python), "bin": root / "bin", "root": root}


def _env(machine: dict, tmp_path: Path, kb_settings: Settings) -> dict[str, str]:
    env = smi_env(
        machine["bin"],
        RUN_MARKER=str(tmp_path / "marker"),
        SGLANG_ENABLE_JIT_DEEPGEMM="0",
        TRIAGE_KB_DIR=str(kb_settings.kb_path),
        TRIAGE_HOME=str(kb_settings.home),
        TRIAGE_ON_DEMAND_INGEST="false",
        TRIAGE_FIX_SEARCH_DEADLINE_S="0",
        HF_HUB_OFFLINE="1",
    )
    env.pop("TRIAGE_CHROMA_URL", None)
    return env


def _run(
    argv: list[str], options: RunOptions, settings: Settings, env: dict[str, str], tmp_path: Path
) -> tuple[int, str, bytes, bytes]:
    """The use case in process; (exit code, our messages, child stdout, child stderr)."""
    out, err = tmp_path / "child.out", tmp_path / "child.err"
    o = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    e = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    text = io.StringIO()
    try:
        code = run(
            argv,
            options,
            settings,
            err=Console(file=text, width=300),
            env=env,
            stdout_fd=o,
            stderr_fd=e,
        )
    finally:
        os.close(o), os.close(e)
    return code, text.getvalue(), out.read_bytes(), err.read_bytes()


def test_flags_are_split_from_the_launcher() -> None:
    assert flags_of(["python3", "-X", "dev", "-m", "sglang.launch_server", "--tp", "8"]) == (
        ["python3", "-X", "dev", "-m", "sglang.launch_server"],
        ["--tp", "8"],
    )
    assert flags_of(["sglang", "serve", "--tp", "8"]) == (["sglang", "serve"], ["--tp", "8"])
    assert flags_of(["/v/bin/python3.12", "launch.py", "--tp", "2"]) == (
        ["/v/bin/python3.12", "launch.py"],
        ["--tp", "2"],
    )
    assert flags_of(
        ["env", "-u", "X", "SGLANG_A=1", "python", "-m", "sglang.launch_server", "--tp", "2"]
    ) == (["env", "-u", "X", "SGLANG_A=1", "python", "-m", "sglang.launch_server"], ["--tp", "2"])
    assert flags_of([]) == ([], [])


def test_run_end_to_end_triages_with_the_installed_release(
    machine: dict, tmp_path: Path, kb_settings: Settings, kb
) -> None:
    argv = [machine["python"], "-m", "sglang.launch_server", *FLAGS]
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "run", "--json", "--", *argv],
        cwd=ROOT,
        env=_env(machine, tmp_path, kb_settings),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr.decode()[-3000:]
    assert proc.stdout == b"stdout of the launch\n"  # SGLang's stdout, unchanged, nothing of ours
    seed = SEED.read_bytes()
    before, sep, after = proc.stderr.partition(seed)
    assert sep == seed  # SGLang's stderr, byte for byte, in one piece
    assert b"would refuse this command" in before and b"launching anyway" in before  # warn
    assert after.count(b"\n") == 1  # then our report: one JSON line
    data = json.loads(after)
    assert data["launched"] and data["exit_code"] == 1 and data["preflight"]["status"] == "errors"
    report = data["report"]
    assert report["status"] == "startup_crash" and report["command"] == argv
    assert report["facts"]["release"]["version"] == "0.5.11"
    assert report["facts"]["release"]["interpreter"] == machine["python"]
    result = report["result"]
    assert result["release"]["release"] == "0.5.11" and result["release"]["match"] == "exact"
    assert result["release"]["method"] == "installed" and result["release"]["source"] == "installed"
    assert (
        result["hardware"]["source"] == "detected"
        and result["hardware"]["name"] == "rtx-pro-6000-x8"
    )
    assert result["hardware"]["evidence"] == RTX_CSV.splitlines()[0]
    assert result["parsed"]["env"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}  # the launch's env
    # located where the engine locates the recorded crash: at the bare assert
    alone = Engine(kb).triage(SEED.read_text(), release="0.5.11")
    assert alone.location is not None and alone.check is not None and alone.check.bare
    assert result["location"]["citation"] == alone.location.citation and result["check"]["bare"]
    assert result["status"] == "located" and result["fixes"]


def test_strict_preflight_refuses_before_launching(
    machine: dict, tmp_path: Path, kb_settings: Settings, kb
) -> None:
    argv = [machine["python"], "-m", "sglang.launch_server", *FLAGS]
    env = _env(machine, tmp_path, kb_settings)
    code, said, out, err = _run(argv, RunOptions(preflight="strict"), kb_settings, env, tmp_path)
    assert code == 2 and not (tmp_path / "marker").exists() and out == err == b""
    assert "SGLang 0.5.11 would refuse this command" in said and "refusing to launch" in said
    fixes = [line for line in said.splitlines() if line.startswith(machine["python"])]
    assert fixes and all(
        "-m sglang.launch_server" in f for f in fixes
    )  # the fix, in the user's launcher
    assert "fix (verified" in said


def test_warn_preflight_launches_and_prints_the_answer_as_text(
    machine: dict, tmp_path: Path, kb_settings: Settings, kb
) -> None:
    from service.cli.render import render_result

    argv = [machine["python"], "-m", "sglang.launch_server", *FLAGS]
    env = _env(machine, tmp_path, kb_settings)
    out, err = tmp_path / "child.out", tmp_path / "child.err"
    o = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    e = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    text = io.StringIO()
    try:
        code = run(
            argv,
            RunOptions(),
            kb_settings,
            err=Console(file=text, width=400),
            env=env,
            stdout_fd=o,
            stderr_fd=e,
            render=render_result,
        )
    finally:
        os.close(o), os.close(e)
    said = text.getvalue()
    assert code == 1 and (tmp_path / "marker").exists() and err.read_bytes() == SEED.read_bytes()
    assert said.index("launching anyway (--preflight warn)") < said.index("a start-up crash")
    assert f"release: 0.5.11 exact (installed; importlib.metadata of {machine['python']}" in said
    assert "hardware: rtx-pro-6000-x8 detected (nvidia-smi" in said
    assert "release 0.5.11 (installed, confidence 1.0)" in said  # the answer's own head
    assert "fix 1 (recommended)" in said


def test_strict_preflight_as_json(machine: dict, tmp_path: Path, kb_settings: Settings, kb) -> None:
    argv = [machine["python"], "-m", "sglang.launch_server", *FLAGS]
    env = _env(machine, tmp_path, kb_settings)
    code, said, _, _ = _run(
        argv, RunOptions(preflight="strict", as_json=True), kb_settings, env, tmp_path
    )
    data = json.loads(said.splitlines()[-1])
    assert code == 2 and data["launched"] is False and not (tmp_path / "marker").exists()
    assert data["preflight"]["errors"][0]["fixes"] and data["preflight"]["release"] == "0.5.11"


def test_a_crash_after_the_ready_line_is_not_a_startup_crash(
    tmp_path: Path, kb_settings: Settings, kb
) -> None:
    child = tmp_path / "serve.py"
    child.write_text(
        "import sys\nprint('[2026-05-02 10:20:00] The server is fired up and ready to roll!')\n"
        'sys.stderr.write(\'Traceback (most recent call last):\\n  File "x.py", line 1\\n'
        "RuntimeError: NCCL error: unhandled system error\\n')\nsys.exit(1)\n"
    )
    argv = [sys.executable, str(child)]
    code, said, out, _ = _run(
        argv, RunOptions(preflight="off", release="0.5.11"), kb_settings, dict(os.environ), tmp_path
    )
    assert code == 1 and b"ready to roll" in out
    assert "not a start-up crash" in said and "RuntimeError: NCCL error" in said
    code, said, _, _ = _run(
        argv,
        RunOptions(preflight="off", release="0.5.11", as_json=True),
        kb_settings,
        dict(os.environ),
        tmp_path,
    )
    report = json.loads(said.splitlines()[-1])["report"]
    assert report["status"] == "not_startup" and report["result"] is None
    assert report["tail"][-1] == "RuntimeError: NCCL error: unhandled system error"


def test_a_release_the_kb_lacks_is_said_and_the_launch_goes_on(
    tmp_path: Path, kb_settings: Settings, kb
) -> None:
    python = fake_sglang(tmp_path / "venv", "0.5.12", "print('serving')\n")
    (tmp_path / "bin").mkdir()
    code, said, out, _ = _run(
        [str(python), "-m", "sglang.launch_server", "--tp", "2"],
        RunOptions(preflight="strict"),
        kb_settings,
        smi_env(tmp_path / "bin"),
        tmp_path,
    )
    assert code == 0 and out == b"serving\n"
    assert "release 0.5.12 is not in the KB: pre-flight skipped" in said


def test_a_stopped_launch_is_not_triaged(tmp_path: Path, kb_settings: Settings) -> None:
    child = tmp_path / "child.py"
    child.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
        "print('loading weights', flush=True)\nwhile True:\n    time.sleep(0.05)\n"
    )
    runner = tmp_path / "runner.py"
    runner.write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from service.settings import Settings\nfrom service.watch.run import RunOptions, run\n"
        f"sys.exit(run([sys.executable, {str(child)!r}], RunOptions(preflight='off', release='0.5.11'),"
        " Settings()))\n"
    )
    out = tmp_path / "out"
    with out.open("wb") as f:
        proc = subprocess.Popen(
            [sys.executable, str(runner)],
            stdout=f,
            stderr=subprocess.PIPE,
            env={**os.environ, "TRIAGE_KB_DIR": str(kb_settings.kb_path)},
        )
        deadline = time.monotonic() + 120
        while b"loading weights" not in out.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert b"stopped by a signal we passed on (exit 143): not triaged" in err


def test_preflight_replay_lets_sglang_judge(kb_settings: Settings) -> None:
    """After clean rule cards, the release's own validation is the judge: the seed's flags
    are refused where SGLang refuses them, and the recommended fix passes."""
    from service.watch.facts import MachineFacts
    from service.watch.run import preflight_replay

    settings = kb_settings.model_copy(update={"replay_enabled": True})
    facts = MachineFacts(
        release={"version": "0.5.11", "source": "test"},
        hardware={"profile": "rtx-pro-6000-x8", "source": "test"},
    )
    launcher = ["python", "-m", "sglang.launch_server"]
    clean = {"status": "ok", "release": "0.5.11", "errors": []}
    refused = preflight_replay(settings, launcher + FLAGS, facts, clean)
    if refused.get("replay", {}).get("status") == "skipped":
        pytest.skip(refused["replay"]["note"])
    assert refused["status"] == "errors" and refused["replay"]["status"] == "raised"
    (error,) = refused["errors"]
    assert error["rule"] == "replay" and error["citations"][0].startswith(
        "0.5.11:sglang/srt/server_args.py:"
    )
    fixed = preflight_replay(
        settings, launcher + FLAGS + ["--speculative-num-steps", "5"], facts, clean
    )
    assert fixed["status"] == "ok" and fixed["replay"]["status"] == "passed"
    # errors the rule cards found are not replayed again
    carded = {"status": "errors", "release": "0.5.11", "errors": [{"rule": "x"}]}
    assert preflight_replay(settings, launcher + FLAGS, facts, carded) is carded
