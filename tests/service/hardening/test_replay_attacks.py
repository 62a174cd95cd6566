"""Issue 26: replay runs no one's code, whatever the spelling (real release, real sandbox).

A planted model folder whose ``config.json`` ``auto_map`` names a ``.py`` that writes a
marker and tries to read a root-only file is passed to replay with every spelling
argparse accepts; no marker appears and the secret is in no answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kb.sources import ReleaseSource
from service.replay import replay_many, sandbox
from service.replay.pool import PoolJob, WarmPool
from service.replay.trees import replay_tree
from service.settings import Settings

pytestmark = pytest.mark.skipif(not sandbox.status().available, reason=sandbox.status().reason)


@pytest.fixture
def planted() -> Iterator[dict[str, Any]]:
    """The planted folder and a root-only secret, outside /tmp (the sandbox's /tmp is its
    own): under /var/tmp, which the sandbox sees read-only like the rest of the host."""
    base = Path("/var/tmp") / f"triage-attack-{uuid.uuid4().hex}"
    base.mkdir(mode=0o755)
    secret_text = f"root-secret-{uuid.uuid4().hex}"
    secret = base / "root-only.txt"
    secret.write_text(secret_text)
    secret.chmod(0o600)
    marker = base / "pwned"
    folder = base / "evil-model"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.Evil"},
            }
        )
    )
    (folder / "evil.py").write_text(
        "import os\n"
        "try:\n"
        f"    text = open({str(secret)!r}).read()\n"
        "except OSError as exc:\n"
        "    text = 'unreadable ' + type(exc).__name__\n"
        "for where in (os.getcwd(), os.path.dirname(__file__)):\n"
        "    try:\n"
        "        open(os.path.join(where, 'pwned'), 'w').write('ran')\n"
        "    except OSError:\n"
        "        pass\n"
        "print('EVIL-RAN ' + text, flush=True)\n"
        "raise RuntimeError('EVIL-RAN ' + text)\n"
    )
    try:
        yield {"folder": folder, "marker": marker, "secret": secret_text}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _attacks(folder: Path) -> list[list[str]]:
    """Every spelling: abbreviations, --flag=value, repeats, relative paths with '..'
    (from the sandbox's working folder, enough '..' reach / and then the planted folder)."""
    rel = os.path.relpath(folder, Path.cwd())
    dotted = "jobs/" + "../" * 12 + str(folder).lstrip("/")
    return [
        ["--model-path", str(folder), "--trust-remote"],
        ["--model-path", dotted, "--trust-remote-cod"],
        ["--model-path", dotted, "--trust-remote-code"],
        ["--model-pat", dotted, "--trust-remote"],
        [f"--model-pat={dotted}", "--trust-remote-cod"],
        ["--model-path", "m", "--model-pat", dotted, "--trust-remote", "--trust-remote"],
        ["--model-path", rel, "--trust-remote"],
        [
            "--model-path",
            "m",
            "--speculative-algorithm",
            "DFLASH",
            "--speculative-draft-model-pat",
            dotted,
            "--trust-remote",
        ],
        [
            "--model-path",
            "m",
            "--speculative-algorithm",
            "DFLASH",
            f"--speculative-draft-model-path={dotted}",
            "--trust-remote-code",
        ],
    ]


@pytest.mark.parametrize("pool", [False, True], ids=["cold", "warm"])
def test_every_spelling_of_remote_code_is_never_run(
    sglang_source: Callable[[str], ReleaseSource],
    cache_settings: Settings,
    planted: dict[str, Any],
    pool: bool,
) -> None:
    src = sglang_source("0.5.11")
    argvs = _attacks(planted["folder"])
    results = replay_many(
        src.root,
        "0.5.11",
        argvs,
        hardware="cpu",
        model_arch="LlamaForCausalLM",
        timeout_s=240,
        job_timeout_s=60,
        settings=cache_settings,
        use_cache=False,
        pool=pool,
    )
    assert not planted["marker"].exists()
    for argv, result in zip(argvs, results, strict=True):
        blob = result.model_dump_json()
        assert planted["secret"] not in blob, argv
        assert "EVIL-RAN" not in blob, argv  # the folder's code never ran
        assert str(planted["folder"]) not in " ".join(result.effective_argv), argv
        assert "--trust-remote-code" not in result.effective_argv, argv
        if "DFLASH" in argv:  # its draft config is loaded and a failure swallowed: never
            assert result.status != "passed" or not result.substitutions[0].startswith(
                "replay refused"
            ), argv  # "verified" for a run that loaded a user's folder


def _tree_and_argv(
    sglang_source: Callable[[str], ReleaseSource],
    cache_settings: Settings,
) -> tuple[Path, list[str]]:
    """0.5.11's replay tree and a command line on a generated Llama folder, for warm jobs."""
    from service.replay.plan import substitute_argv

    src = sglang_source("0.5.11")
    tree, _ = replay_tree(
        src.root, "0.5.11", home=cache_settings.home, wheel_dir=cache_settings.wheel_dir
    )
    argv, _, _ = substitute_argv(["--model-path", "m"], "LlamaForCausalLM", cache_settings.home)
    assert argv is not None
    return tree, argv


def test_a_job_that_leaves_a_process_retires_the_worker(
    sglang_source: Callable[[str], ReleaseSource], cache_settings: Settings, tmp_path: Path
) -> None:
    """A job whose code starts a setsid sleeper: the sleeper is killed, the worker retired,
    and the next job runs in a new worker."""
    tag = f"sleeper-{uuid.uuid4().hex}"
    payload = tmp_path / "payload.py"
    payload.write_text(
        "import subprocess\n"
        f"subprocess.Popen(['setsid', 'sh', '-c', 'sleep 300; true', {tag!r}],"
        " start_new_session=True)\n"
        f"open('started', 'w').write({tag!r})\n"
    )
    tmp_path.chmod(0o755)
    tree, argv = _tree_and_argv(sglang_source, cache_settings)
    pool = WarmPool(max_workers=1, idle_timeout_s=0)
    try:
        [first] = pool.run(tree, None, cache_settings.home, [PoolJob(argv, 60, payload=payload)])
        assert first is not None and first.get("leftover_processes", 0) >= 1
        assert first.get("worker_retired") is True
        alive = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
        assert alive.stdout.strip() == ""
        pid_before = pool.stats()["workers"][0]["pid"]
        assert pid_before is None
        [second] = pool.run(tree, None, cache_settings.home, [PoolJob(argv, 60)])
        assert second is not None and "leftover_processes" not in second
        assert pool.stats()["workers"][0]["starts"] == 2
    finally:
        pool.close()


def test_remote_code_is_refused_even_past_the_filters(
    sglang_source: Callable[[str], ReleaseSource],
    cache_settings: Settings,
    planted: dict[str, Any],
    tmp_path: Path,
) -> None:
    """Defence in depth: code in a warm job's fork that asks transformers for the folder's
    auto_map class with trust_remote_code=True is refused; the job is never 'passed'."""
    payload = tmp_path / "payload.py"
    payload.write_text(
        "from transformers import AutoConfig\n"
        f"AutoConfig.from_pretrained({str(planted['folder'])!r}, "
        "trust_remote_code=True)\n"
    )
    tmp_path.chmod(0o755)
    tree, argv = _tree_and_argv(sglang_source, cache_settings)
    pool = WarmPool(max_workers=1, idle_timeout_s=0)
    try:
        [raw] = pool.run(tree, None, cache_settings.home, [PoolJob(argv, 60, payload=payload)])
    finally:
        pool.close()
    assert raw is not None
    assert (raw["status"], raw["phase"]) == ("harness_error", "unsafe"), raw
    assert "load code from a model folder" in raw["harness_reason"]
    assert "EVIL-RAN" not in json.dumps(raw) and planted["secret"] not in json.dumps(raw)
    assert not planted["marker"].exists()


def test_through_a_real_server_nothing_of_the_folder_runs_or_leaks(
    api_settings: Settings, planted: dict[str, Any]
) -> None:
    """POST /triage with the attack in the logged command (abbreviated flags, a relative
    path with '..', the DFLASH draft): the background replay finishes, and neither the
    code's marker nor the root-only secret is in any stored answer."""
    import httpx

    from ..api.conftest import make_server
    from .test_security import _log, _wait_replay

    dotted = "jobs/" + "../" * 12 + str(planted["folder"]).lstrip("/")
    log = _log()
    first_cmd = log.splitlines()[0]
    attacks = [
        f"$ python3 -m sglang.launch_server --model-pat {dotted} --tp 8 --trust-remote "
        "--speculative-algorithm EAGLE3 --speculative-draft-model-pat "
        f"{dotted} --speculative-eagle-topk 4 --speculative-num-draft-tokens 8",
        f"$ python3 -m sglang.launch_server --model-path={dotted} --tp 8 --trust-remote-cod "
        f"--speculative-algorithm DFLASH --speculative-draft-model-path={dotted}",
    ]
    on = api_settings.model_copy(update={"replay_enabled": True})
    stored = []
    with make_server(on) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        for cmd in attacks:
            body = {
                "log": log.replace(first_cmd, cmd, 1),
                "release": "0.5.11",
                "hardware": "rtx-pro-6000-x8",
                "model_arch": "DeepseekV3ForCausalLM",
            }
            r = c.post("/triage", json=body)
            assert r.status_code == 200, r.text
            stored.append(_wait_replay(c, r.json()["id"]))
    assert not planted["marker"].exists()
    for answer in stored:
        assert answer.get("replay", {}).get("status") not in (None, "pending"), answer
        blob = json.dumps(answer)
        assert planted["secret"] not in blob and "EVIL-RAN" not in blob
