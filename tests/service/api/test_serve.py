"""``sglang-triage serve`` as users run it: a real uvicorn process and its JSON-lines logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .conftest import free_port


def test_serve_logs_json_lines_with_one_access_line_per_request(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "TRIAGE_KB_DIR": str(tmp_path / "kb"),
        "TRIAGE_API_KEYS": "[]",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("TRIAGE_CHROMA_URL", None)
    err = (tmp_path / "serve.err").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"{url}/healthz", headers={"x-request-id": "probe-1"}, timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, Path(
                    err.name
                ).read_text()
                time.sleep(0.2)
        assert r.status_code == 200 and r.headers["x-request-id"] == "probe-1"
        assert httpx.post(f"{url}/triage", content=b"", timeout=10).status_code == 400
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 200
        time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = [line for line in Path(err.name).read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert records and all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    assert any(r["logger"].startswith("uvicorn") for r in records)  # uvicorn's own lines too
    access = [r for r in records if r["logger"] == "sglang_triage.access"]
    assert [(a["request_id"], a["method"], a["path"], a["status"]) for a in access][0] == (
        "probe-1",
        "GET",
        "/healthz",
        200,
    )
    assert [(a["path"], a["status"]) for a in access[1:]] == [("/triage", 400), ("/metrics", 200)]
    for a in access:
        assert a["client"] == "127.0.0.1" and isinstance(a["duration_ms"], int | float)
        assert len(a["request_id"]) >= 1 and a["msg"] == f"{a['method']} {a['path']} {a['status']}"
    assert not [r for r in records if "HTTP/1.1" in r["msg"]]  # no second, id-less access log
    assert not [
        r for r in records if "request_id" in r and r not in access
    ]  # none outside requests
