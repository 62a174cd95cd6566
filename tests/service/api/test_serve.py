"""``sglang-triage serve`` as users run it: a real uvicorn process and its access log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .conftest import free_port


def test_serve_logs_one_json_line_per_request_with_its_id(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "TRIAGE_KB_DIR": str(tmp_path / "kb"), "TRIAGE_API_KEYS": "[]",
           "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "serve.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "service.cli.main", "serve",
                             "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"{url}/healthz", headers={"x-request-id": "probe-1"}, timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, \
                    Path(log.name).read_text()
                time.sleep(0.2)
        assert r.status_code == 200 and r.headers["x-request-id"] == "probe-1"
        assert httpx.post(f"{url}/triage", content=b"", timeout=10).status_code == 400
        time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = Path(log.name).read_text().splitlines()
    access = [json.loads(line[line.index("{"):]) for line in lines if '"request_id"' in line]
    assert {"request_id": "probe-1", "method": "GET", "path": "/healthz", "status": 200} \
        .items() <= access[0].items()
    assert [(a["path"], a["status"]) for a in access[1:]] == [("/triage", 400)]
    assert not [line for line in lines if "HTTP/1.1\" 200" in line]  # no second, id-less access log
