"""Limits of a running service (issue 26): each attack of the review against a real server,
refused. Nothing here measures wall-clock time: work is bounded by counts and bytes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kb.records import Records
from service.api import access
from service.settings import Settings

from ..api.conftest import free_port, make_server

SEED = Path(__file__).resolve().parents[3] / "examples" / "seed_attempt1.log"
GOOD, OTHER, TEAM = "key-good-0123456789", "key-other-0123456789", "key-team-0123456789"


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture()
def own_records(api_settings: Settings, tmp_path: Path) -> Settings:
    """The suite's KB with records in a database of the test's own (purges touch nothing
    shared)."""
    return api_settings.model_copy(
        update={"database_url": f"sqlite:///{tmp_path / 'records.sqlite'}"}
    )


# ------------------------------------------------------------------ keys and rates


def test_wrong_keys_from_an_address_never_lock_out_its_valid_keys(api_settings: Settings) -> None:
    keyed = api_settings.model_copy(update={"api_keys": [GOOD]})
    with make_server(keyed) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        codes = [c.get("/releases", headers=_auth(f"wrong-{i}")).status_code for i in range(12)]
        assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]  # the limit still holds
        assert c.get("/releases", headers=_auth(GOOD)).status_code == 200  # same address
        assert c.get("/releases", headers=_auth("wrong-again")).status_code == 429


def test_the_wrong_key_table_is_bounded(api_settings: Settings, monkeypatch) -> None:
    """Wrong keys from many addresses (forwarded by a proxy on loopback) keep at most
    ``MAX_FAILING_CLIENTS`` addresses in memory."""
    monkeypatch.setattr(access, "MAX_FAILING_CLIENTS", 20)
    keyed = api_settings.model_copy(update={"api_keys": [GOOD]})
    with make_server(keyed) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        for i in range(60):
            r = c.get("/releases", headers={**_auth("wrong"), "x-forwarded-for": f"10.1.0.{i}"})
            assert r.status_code == 401
        assert len(srv.server.config.app.state.key_failures) == 20


def test_triage_is_rate_limited_per_client(api_settings: Settings) -> None:
    limited = api_settings.model_copy(
        update={
            "api_keys": [GOOD, OTHER],
            "team_api_keys": [TEAM],
            "triage_rate_per_minute": 1.0,
            "triage_burst": 3,
        }
    )
    with make_server(limited) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        # empty bodies (400) cost a token too: the bucket is taken before any work
        codes = [c.post("/triage", content=b"", headers=_auth(GOOD)).status_code for _ in range(5)]
        assert codes == [400, 400, 400, 429, 429]
        r = c.post("/triage", content=b"", headers=_auth(GOOD))
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert r.json()["detail"].startswith("too many triages")
        assert c.post("/triage", content=b"", headers=_auth(OTHER)).status_code == 400  # own bucket
        assert c.get("/releases", headers=_auth(GOOD)).status_code == 200  # only /triage
        team = [c.post("/triage", content=b"", headers=_auth(TEAM)).status_code for _ in range(5)]
        assert team == [400] * 5  # team keys (the eval suite, automation) are not limited


def test_bounded_dict_keeps_the_most_recent() -> None:
    from service.api.limits import BoundedDict, TokenBuckets

    table: BoundedDict[str, int] = BoundedDict(3)
    for i in range(10):
        table[f"k{i}"] = i
    assert len(table) == 3 and table.get("k0") is None and table.get("k9") == 9
    buckets = TokenBuckets(60.0, 2, max_keys=5, clock=lambda: 0.0)
    for i in range(100):
        buckets.take(f"client-{i}")
    assert len(buckets) == 5


def test_slack_token_buckets_are_bounded() -> None:
    from service.slack.state import TokenBucket

    bucket = TokenBucket(rate=1.0, burst=1, max_keys=10)
    for i in range(100):
        bucket.try_take(f"C{i}")
    assert len(bucket) == 10


# ----------------------------------------------------------------------- records


def test_the_records_bound_is_in_bytes_oldest_unconfirmed_purged_first(
    own_records: Settings, tmp_path: Path
) -> None:
    log = SEED.read_text()
    with make_server(own_records) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        first = c.post("/triage?release=0.5.11", content=log).json()["id"]
        assert (
            c.post(
                f"/incidents/{first}/confirm", json={"fix": {"rank": 1}, "note": "kept"}
            ).status_code
            == 200
        )
        records = Records(own_records.database_url)
        one = records.size_bytes()
        bound = 3 * one + one // 2  # room for the confirmed one and two and a half more
    bounded = own_records.model_copy(update={"records_max_bytes": bound})
    with make_server(bounded) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        ids = [c.post("/triage?release=0.5.11", content=log).json()["id"] for _ in range(6)]
    assert records.size_bytes() <= bound
    kept = [tid for tid in ids if records.get(tid) is not None]
    assert records.get(first) is not None  # confirmed: never purged by the bound
    assert kept == ids[-len(kept) :] and 1 <= len(kept) < 6  # the newest stayed


def test_a_nearly_full_disk_answers_without_storing(own_records: Settings) -> None:
    full = own_records.model_copy(update={"records_min_free_bytes": 1 << 62})
    with make_server(full) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        r = c.post("/triage?release=0.5.11", content=SEED.read_text())
        assert r.status_code == 200
        body = r.json()
        assert body["id"] is None and body["fixes"]
        assert any("not stored" in d and "nearly full" in d for d in body["degraded"])
    assert Records(own_records.database_url).count() == 0


def test_purge_records_command_takes_a_byte_bound(tmp_path: Path, api_settings: Settings) -> None:
    from typer.testing import CliRunner

    from service.cli.main import app

    records = Records(tmp_path / "kb" / "records.sqlite")
    for i in range(4):
        records.save(f"p{i}", {"log": "x" * 1000}, {"summary": str(i)})
    env = {"TRIAGE_KB_DIR": str(tmp_path / "kb"), "TRIAGE_HOME": str(api_settings.home)}
    res = CliRunner().invoke(app, ["purge-records", "--max-bytes", "2500"], env=env)
    assert res.exit_code == 0, res.output
    assert [t for t in ("p0", "p1", "p2", "p3") if records.get(t)] == ["p2", "p3"]


# ---------------------------------------------------------------- error echoes


def test_validation_errors_echo_only_a_short_prefix(client: httpx.Client) -> None:
    tid = client.post("/triage?release=0.5.11", content=SEED.read_text()).json()["id"]
    note = "n" * 800_000
    r = client.post(
        f"/incidents/{tid}/confirm",
        json={"fix": {"remove": ["--speculative-eagle-topk"]}, "note": note},
    )
    assert r.status_code == 422
    assert len(r.content) < 4000 and "nnnn" in r.text  # a prefix, not 800 KB back
    r = client.post(f"/incidents/{tid}/confirm", json={"fix": {"set": {"x" * 5000: 1}}})
    assert r.status_code == 422 and len(r.content) < 8000


# ----------------------------------------------------------------- slow headers


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[int]:
    """``sglang-triage serve`` as users run it, with a one-second header timeout."""
    port = free_port()
    env = {
        **os.environ,
        "TRIAGE_KB_DIR": str(tmp_path / "kb"),
        "TRIAGE_API_KEYS": "[]",
        "HF_HUB_OFFLINE": "1",
        "TRIAGE_HEADER_TIMEOUT_S": "1",
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
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, Path(
                    err.name
                ).read_text()
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_connections_that_never_finish_their_headers_are_closed(served: int) -> None:
    """Twenty connections send a request's headers a byte at a time, never finishing: the
    server closes every one of them before 120 bytes (30 s at this pace) have gone out; a
    complete request is answered as ever. Plain uvicorn keeps them all open."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    socks = [socket.create_connection(("127.0.0.1", served), timeout=5) for _ in range(20)]
    open_ = list(socks)
    sent = 0
    for byte in head[:120]:
        for s in list(open_):
            s.settimeout(0.0125)
            try:
                s.sendall(bytes([byte]))
            except OSError:
                open_.remove(s)
                continue
            if _closed(s):
                open_.remove(s)
        sent += 1
        if not open_:
            break
    for s in socks:
        s.close()
    assert open_ == [] and sent < 120
    assert httpx.get(f"http://127.0.0.1:{served}/healthz", timeout=10).status_code == 200


def test_the_replay_verdict_cache_is_bounded(tmp_path: Path, monkeypatch) -> None:
    """Every distinct command line a client sends is a cache file: at most
    ``CACHE_MAX_FILES`` stay, the least recently written deleted first."""
    from service.replay import harness
    from service.replay.results import ReplayResult

    monkeypatch.setattr(harness, "CACHE_MAX_FILES", 10)
    monkeypatch.setattr(harness, "CACHE_PRUNE_EVERY", 5)
    monkeypatch.setattr(harness, "_cache_writes", [0])
    for i in range(40):
        result = ReplayResult(status="passed", version="0.5.11", argv=[f"--tp={i}"])
        key = harness._cache_key({"argv": [f"--tp={i}"]})
        harness._cache_put(tmp_path, key, result)
        os.utime(harness._cache_path(tmp_path, key), (i, i))  # written in this order
    kept = sorted(p for p in (tmp_path / "replay-cache").rglob("*.json"))
    assert len(kept) == 10  # pruned at the 40th write
    newest = harness._cache_path(tmp_path, harness._cache_key({"argv": ["--tp=39"]}))
    assert newest in kept
