"""The replay sandbox holds against a hostile child.

A test-only payload (``replay_many(..., test_payload=...)``, never reachable from
a request) runs inside the child before anything else and tries what code
smuggled in through a log could try: read the service's environment, reach a
server on the host's loopback, write outside its work folder, leave a process
behind. It prints what it managed as one JSON line, read back from the log.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from string import Template

import pytest

from kb.sources import ReleaseSource
from service.replay import replay_many
from service.replay.sandbox import Limits, status
from service.settings import Settings

pytestmark = pytest.mark.skipif(not status().available, reason=status().reason)

PAYLOAD = r"""
import json, os, resource, socket, subprocess, sys
report = {"uid": os.getuid(), "env_has_canary": $canary in json.dumps(dict(os.environ))}
report["limits"] = {name: resource.getrlimit(getattr(resource, name))[1] for name in
                    ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC")}
try:
    report["parent_environ"] = $canary in open("/proc/$pid/environ").read()
except OSError as exc:
    report["parent_environ"] = type(exc).__name__
seen = False
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            seen |= $canary.encode() in open(f"/proc/{entry}/environ", "rb").read()
        except OSError:
            pass
report["canary_in_any_proc"] = seen
try:
    socket.create_connection(("127.0.0.1", $port), timeout=3).close()
    report["socket"] = "connected"
except OSError as exc:
    report["socket"] = type(exc).__name__
writes = {}
for target in $targets:
    try:
        with open(target, "w") as fh:
            fh.write("pwned")
        writes[target] = "written"
    except OSError as exc:
        writes[target] = type(exc).__name__
report["writes"] = writes
report["kb_visible"] = os.path.exists($kb)
subprocess.Popen(["setsid", "sleep", "300", $marker], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("PAYLOAD-REPORT " + json.dumps(report), flush=True)
os._exit(0)
"""


@pytest.fixture(scope="module")
def listener():
    """A TCP server on the host's loopback that records every connection it accepts."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append("x")
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    t.join(timeout=2)
    srv.close()


def test_a_payload_in_the_child_is_contained(
    sglang_source: Callable[[str], ReleaseSource],
    cache_settings: Settings,
    tmp_path: Path,
    listener,
    monkeypatch,
) -> None:
    port, accepted = listener
    canary = f"xoxb-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("TRIAGE_SLACK_BOT_TOKEN", canary)
    marker = f"sandbox-marker-{uuid.uuid4().hex}"
    kb_file = cache_settings.home / "test-kb" / "index.sqlite"
    targets = [
        str(tmp_path / "outside.txt"),
        str(kb_file.parent / "pwned.txt"),
        str(Path(__file__).parent / "pwned.txt"),
        "/etc/pwned.txt",
    ]
    payload = tmp_path / "payload.py"
    payload.write_text(
        Template(PAYLOAD).substitute(
            canary=repr(canary),
            pid=os.getpid(),
            port=port,
            targets=repr(targets),
            kb=repr(str(kb_file)),
            marker=repr(marker),
        )
    )
    src = sglang_source("0.5.11")
    [result] = replay_many(
        src.root,
        "0.5.11",
        [["--model-path", "m", "--tp", "1"]],
        hardware="cpu",
        model_arch="LlamaForCausalLM",
        timeout_s=60,
        job_timeout_s=30,
        settings=cache_settings,
        use_cache=False,
        test_payload=payload,
    )
    # the sandbox ended when the payload exited (os._exit(0), no verdict): not killed at its
    # 60 s deadline, so the setsid child left behind did not keep the harness waiting
    assert result.status == "harness_error" and result.phase == "crash", result.summary()
    assert "exited (0) without a result" in (result.harness_reason or ""), result.harness_reason
    line = next(ln for ln in result.log_tail.splitlines() if ln.startswith("PAYLOAD-REPORT "))
    report = json.loads(line.split(" ", 1)[1])
    assert report["uid"] == 65534  # unprivileged
    limits = Limits()
    assert report["limits"]["RLIMIT_AS"] == limits.address_space_bytes  # resource limits
    assert report["limits"]["RLIMIT_FSIZE"] == limits.file_size_bytes
    assert report["limits"]["RLIMIT_NOFILE"] == limits.open_files
    assert report["limits"]["RLIMIT_NPROC"] == limits.processes
    assert 0 < report["limits"]["RLIMIT_CPU"] <= 60 + 30
    assert report["env_has_canary"] is False  # a clean environment
    assert report["parent_environ"] != True  # noqa: E712      # the service's pid is not there
    assert report["canary_in_any_proc"] is False  # nor any process that has it
    assert report["socket"] != "connected" and accepted == []  # no network, not even loopback
    assert report["kb_visible"] is False  # the KB and records are hidden
    for target in targets:
        assert not Path(target).exists(), target  # nothing written on the host
    # the setsid child died with the sandbox
    time.sleep(0.5)
    alive = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert alive.stdout.strip() == ""


def test_without_bubblewrap_replay_refuses(
    monkeypatch,
    sglang_source,
    cache_settings: Settings,
) -> None:
    """No silent fallback: without the sandbox the answer is 'unverified', nothing runs."""
    from service.replay import sandbox
    from service.replay.errors import ReplayError

    status.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    try:
        assert not sandbox.status().available and "bubblewrap" in sandbox.status().reason
        with pytest.raises(ReplayError, match="bubblewrap"):
            replay_many(
                sglang_source("0.5.11").root,
                "0.5.11",
                [["--model-path", "m"]],
                hardware="cpu",
                model_arch="LlamaForCausalLM",
                settings=cache_settings,
                use_cache=False,
            )
    finally:
        status.cache_clear()
