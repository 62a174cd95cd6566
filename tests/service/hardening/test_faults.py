"""Fault injection: Chroma server killed, ingest SIGKILLed, ingest during triage."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from ingest.pipeline import in_scope, ingest
from kb.knowledge import KnowledgeBase
from kb.sources import read_local

from ..api.conftest import free_port, make_server

pytestmark = pytest.mark.long_pole  # minutes: scheduled first (tests/conftest.py)

SMALL = [
    "sglang/launch_server.py",
    "sglang/srt/configs/load_config.py",
    "sglang/srt/configs/device_config.py",
    "sglang/srt/server_args_config_parser.py",
]


def small_tree(full: Path, dest: Path, version: str) -> Path:
    for rel in SMALL:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(full / rel, dest / rel)
    (dest / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    return dest


def _wait_http(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


@pytest.fixture()
def chroma_server(tmp_path):
    port = free_port()
    exe = Path(sys.executable).parent / "chroma"
    proc = subprocess.Popen(
        [
            str(exe),
            "run",
            "--path",
            str(tmp_path / "chroma"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_http(f"http://127.0.0.1:{port}/api/v2/heartbeat")
    yield proc, f"http://127.0.0.1:{port}"
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_chroma_server_killed_triage_keeps_answering_degraded(
    kb_settings, sglang_source, tmp_path, chroma_server, kb
) -> None:
    proc, url = chroma_server
    settings = kb_settings.model_copy(update={"kb_dir": tmp_path / "kb", "chroma_url": url})
    server_kb = KnowledgeBase(settings)
    src = read_local(small_tree(sglang_source("0.5.11").root, tmp_path / "src", "0.5.11"))
    report = ingest(server_kb, src, scope="default")
    assert report.upserted > 0 and server_kb.vectors.count("0.5.11") == report.upserted
    # the API reads the suite's KB for releases, and this Chroma server for vectors
    api = kb_settings.model_copy(update={"chroma_url": url})
    log = (Path(__file__).resolve().parents[3] / "examples" / "seed_attempt1.log").read_text()
    with make_server(api) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.get("/readyz").json()["chroma"] == "ok"
        first = c.post("/triage?release=0.5.11", content=log)
        assert first.status_code == 200 and first.json()["degraded"] == []
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        ready = c.get("/readyz").json()
        assert ready["chroma"] == "unreachable" and ready["degraded"] is True
        time.sleep(5.1)  # past the health cache
        after = c.post("/triage?release=0.5.11", content=log)
        assert after.status_code == 200
        body = after.json()
        assert body["location"]["function"] == "ServerArgs._handle_speculative_decoding"
        assert any("vector store" in d for d in body["degraded"])
        search = c.get("/search", params={"q": "speculative", "release": "0.5.11"})
        assert search.status_code == 200 and search.json()["degraded"]


def _kb_snapshot(kb: KnowledgeBase, version: str) -> dict:
    counts = {
        t: kb.store.query(f"SELECT COUNT(*) AS n FROM {t} WHERE release = ?", (version,))[0]["n"]
        for t in ("files", "functions", "chunks", "checks", "refs", "flags")
    }
    ids = kb.vectors.collection.get(where={"release": version}, include=[])["ids"]
    return {
        "counts": counts,
        "vector_ids": sorted(ids),
        "dupes": len(ids) - len(set(ids)),
        "hash": kb.store.release(version)["content_hash"],
    }


def test_ingest_killed_midway_reruns_to_an_identical_kb(
    kb_settings, sglang_source, tmp_path
) -> None:
    tree = small_tree(sglang_source("0.5.11").root, tmp_path / "src", "0.5.11")
    env = dict(os.environ, TRIAGE_KB_DIR=str(tmp_path / "killed"), TRIAGE_EMBEDDING_BATCH_SIZE="8")
    cmd = [sys.executable, "-m", "service.cli.main", "ingest", "--path", str(tree)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    index = tmp_path / "killed" / "index.sqlite"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # kill once the first vectors have been committed
        if index.exists():
            try:
                with sqlite3.connect(index, timeout=1) as con:
                    if con.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] > 0:
                        break
            except sqlite3.Error:
                pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rerun = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path / "killed"}))
    fresh = KnowledgeBase(kb_settings.model_copy(update={"kb_dir": tmp_path / "fresh"}))
    ingest(fresh, read_local(tree), scope="default")
    a, b = _kb_snapshot(rerun, "0.5.11"), _kb_snapshot(fresh, "0.5.11")
    assert a == b and a["dupes"] == 0
    n_scope = sum(
        1
        for r in rerun.store.query("SELECT path FROM chunks WHERE release = '0.5.11'")
        if in_scope(r["path"], "default")
    )
    assert len(a["vector_ids"]) == n_scope
    assert rerun.store.release("0.5.11")["status"] == "complete"


def test_ingest_and_triage_at_the_same_time(api_settings, sglang_source, tmp_path, kb) -> None:
    """A server answers triages while an ingest writes to the KB it reads. The KB is a
    private copy of the suite's index: an extra release in the shared KB would change
    what other test processes' triages resolve to while it is there."""
    tree = small_tree(sglang_source("0.5.11").root, tmp_path / "src", "0.0.1.dev0")
    settings = api_settings.model_copy(update={"kb_dir": tmp_path / "kb"})
    settings.kb_path.mkdir(parents=True)
    src = sqlite3.connect(f"file:{api_settings.kb_path / 'index.sqlite'}?mode=ro", uri=True)
    dst = sqlite3.connect(settings.kb_path / "index.sqlite")
    src.backup(dst)
    src.close()
    dst.close()
    errors: list[str] = []
    answered: list[str] = []
    log = (Path(__file__).resolve().parents[3] / "examples" / "seed_attempt1.log").read_text()
    stop, first = threading.Event(), threading.Event()
    with make_server(settings) as srv:

        def hammer() -> None:
            # hang guards only: a cold first triage on a loaded machine may take minutes
            with httpx.Client(base_url=srv.url, timeout=600) as c:
                while not stop.is_set():
                    try:
                        r = c.post("/triage?release=0.5.11", content=log)
                    except httpx.HTTPError as exc:  # said, not lost with the thread
                        errors.append(f"{type(exc).__name__}: {exc}")
                        first.set()
                        return
                    answered.append(r.json().get("release", {}).get("release", ""))
                    first.set()
                    if r.status_code != 200:
                        errors.append(f"{r.status_code}: {r.text[:200]}")

        t = threading.Thread(target=hammer)
        t.start()
        try:
            assert first.wait(900), errors  # triages are under way before the ingest starts
            shared = KnowledgeBase(settings)  # the same KB folder the server reads
            report = ingest(shared, read_local(tree), scope="none")
            assert report.structure == "indexed"
        finally:
            stop.set()
            t.join(timeout=900)
        assert shared.store.release("0.0.1.dev0") is not None
        shared.close()
    assert errors == []
    assert answered and set(answered) == {"0.5.11"}
