"""Attacks on a running service (real uvicorn on loopback), each refused.

Every test reproduces a finding of the security review (issue #18) against the
HTTP API and asserts that it now fails, and that nothing already stored is
harmed.
"""

from __future__ import annotations

import json
import resource
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from kb.records import Records
from service.settings import Settings

from ..api.conftest import make_server

SEED = Path(__file__).resolve().parents[3] / "examples" / "seed_attempt1.log"


def _log() -> str:
    return SEED.read_text()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- confirmations


def test_a_deep_or_surrogate_confirmation_is_refused_and_breaks_nothing(
    client: httpx.Client,
) -> None:
    first = client.post("/triage?release=0.5.11", content=_log()).json()
    deep: object = "x"
    for _ in range(254):
        deep = [deep]
    r = client.post(
        f"/incidents/{first['id']}/confirm", json={"fix": {"set": {"--tp": deep}}, "note": "deep"}
    )
    assert r.status_code == 422
    surrogate = '{"fix": {"remove": ["--speculative-eagle-topk"]}, "note": "\\ud800"}'
    r = client.post(
        f"/incidents/{first['id']}/confirm",
        content=surrogate,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and "surrogate" in r.json()["detail"]
    r = client.post(
        f"/incidents/{first['id']}/confirm",
        json={"fix": {"set": {"--no-such-flag": 1}}, "note": "x"},
    )
    assert r.status_code == 422 and "--no-such-flag" in r.json()["detail"]
    r = client.post(
        f"/incidents/{first['id']}/confirm",
        json={"fix": {"remove": ["--speculative-eagle-topk"]}, "note": "n" * 2001},
    )
    assert r.status_code == 422
    assert client.get(f"/triage/{first['id']}").status_code == 200
    assert client.post("/triage?release=0.5.11", content=_log()).status_code == 200


def test_a_damaged_stored_record_never_breaks_a_request(
    api_settings: Settings, tmp_path: Path
) -> None:
    """A row written before the checks (deep fix, lone surrogate) is read as damaged. The
    records are this test's own (what other tests stored never reaches ``similar`` here)."""
    db = tmp_path / "records.sqlite"
    settings = api_settings.model_copy(update={"database_url": f"sqlite:///{db}"})
    with make_server(settings) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        _damaged_rows_are_read_as_damaged(client, db)


def _damaged_rows_are_read_as_damaged(client: httpx.Client, db: Path) -> None:
    first = client.post("/triage?release=0.5.11", content=_log()).json()
    deep = "1"
    for _ in range(300):
        deep = f"[{deep}]"
    second = client.post("/triage?release=0.5.11", content=_log()).json()
    third = client.post("/triage?release=0.5.11", content=_log()).json()
    con = sqlite3.connect(db)
    rows = [
        (first["id"], '{"set": {"--tp": ' + deep + "}}", "deep"),
        (second["id"], '{"remove": ["\\ud800"]}', "surrogate"),
        (third["id"], '{"rank": 1}', None),
    ]
    for tid, fix, note in rows:
        con.execute(
            "INSERT OR REPLACE INTO confirmations VALUES (?, '2026-01-01T00:00:00', ?, ?, 'api')",
            (tid, fix, note),
        )
    # a note that is not even UTF-8 (written by something else entirely)
    con.execute(
        "UPDATE confirmations SET note = CAST(X'62616420eda080' AS TEXT) WHERE id = ?",
        (third["id"],),
    )
    con.commit()
    con.close()
    for tid in (first["id"], second["id"]):
        rec = client.get(f"/triage/{tid}")
        assert rec.status_code == 200 and "confirmation.fix" in rec.json()["damaged"]
    assert client.get(f"/triage/{third['id']}").status_code == 200
    later = client.post("/triage?release=0.5.11", content=_log())  # same function: similar
    assert later.status_code == 200
    assert all(
        s.get("note") in ("", None) or "bad" not in s["note"] for s in later.json()["similar"]
    )
    assert client.get("/incidents").status_code == 200


def test_lone_surrogates_in_triage_and_lint_bodies_get_4xx(client: httpx.Client) -> None:
    for path, body in [
        ("/triage", '{"log": "Traceback\\ud800"}'),
        ("/triage", '{"log": "x", "command": "--tp \\udfff"}'),
        ("/lint", '{"release": "0.5.11", "flags": ["--tp", "\\ud800"]}'),
    ]:
        r = client.post(path, content=body, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (path, r.status_code)


# ------------------------------------------------------------------ body limits


def test_a_200_mb_chunked_body_to_slack_events_is_refused_in_bounded_memory(server) -> None:
    chunk = b"x" * (1 << 20)
    sent = 0

    def body():
        nonlocal sent
        for _ in range(200):
            sent += len(chunk)
            yield chunk

    before = _rss_mb()
    status = None
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            status = c.post(
                "/slack/events",
                content=body(),
                headers={
                    "content-type": "application/json",
                    "x-slack-request-timestamp": str(int(time.time())),
                },
            ).status_code
    except httpx.TransportError:
        status = "closed"  # the server answered 413 and closed while we were still sending
    assert status in (413, "closed")
    assert sent < 200 * len(chunk) or status == 413
    assert _rss_mb() - before < 100


@pytest.mark.parametrize("path", ["/lint", "/incidents/x/confirm", "/triage"])
def test_every_route_has_the_body_limit(client: httpx.Client, path: str) -> None:
    r = client.post(
        path,
        content=b'{"a": "' + b"x" * (3 << 20) + b'"}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["error"] == "InputTooLarge"


# --------------------------------------------------------------------- secrets


def test_secrets_are_in_no_answer_fix_or_stored_record(
    client: httpx.Client, api_settings: Settings
) -> None:
    secrets = ["sk-live1234567890abcdefXYZ", "hf_abcdefghijklmnopqrstuv", "s3cr3t-admin-key"]
    log = _log().replace(
        "python3 -m sglang.launch_server",
        f"HF_TOKEN={secrets[1]} python3 -m sglang.launch_server --api-key "
        f"{secrets[0]} --admin-api-key {secrets[2]}",
        1,
    )
    assert all(s in log for s in secrets)
    r = client.post("/triage?release=0.5.11", content=log)
    assert r.status_code == 200
    text = r.text
    assert not any(s in text for s in secrets)
    fixes = r.json()["fixes"]
    assert fixes and all(
        "--api-key ***" in " ".join(f["argv"]) or "--api-key" not in f["argv"] for f in fixes
    )
    stored = client.get(f"/triage/{r.json()['id']}").text
    assert not any(s in stored for s in secrets)
    raw = b"".join(p.read_bytes() for p in api_settings.kb_path.glob("records.sqlite*"))
    assert not any(s.encode() in raw for s in secrets)


def test_triage_ids_are_random_not_derived_from_the_log(client: httpx.Client) -> None:
    a = client.post("/triage?release=0.5.11", content=_log()).json()["id"]
    b = client.post("/triage?release=0.5.11", content=_log()).json()["id"]
    assert a != b and len(a) >= 20


def test_keys_guard_incidents_docs_and_similar_ids(api_settings: Settings) -> None:
    keyed = api_settings.model_copy(update={"api_keys": ["k-right"]})
    with make_server(keyed) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        for path in ("/incidents", "/docs", "/openapi.json", "/triage/x"):
            assert c.get(path).status_code == 401, path
        auth = {"authorization": "Bearer k-right"}
        assert c.get("/incidents?limit=1", headers=auth).status_code == 200
        docs = c.get("/docs", headers=auth)
        assert docs.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in docs.text
        assert "cdn" not in docs.text.lower()
        assert c.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
        # wrong keys are limited per client
        codes = [
            c.get("/releases", headers={"authorization": f"Bearer wrong-{i}"}).status_code
            for i in range(12)
        ]
        assert codes[:10] == [401] * 10 and codes[-1] == 429


# ------------------------------------------------------------ browser requests


def test_cross_site_posts_and_foreign_hosts_are_refused(client: httpx.Client, server) -> None:
    log = _log()
    for headers in (
        {"origin": "http://evil.example"},
        {"sec-fetch-site": "cross-site"},
        {"origin": "null"},
        {"origin": "http://127.0.0.1:1"},
    ):
        r = client.post("/triage", content=log, headers={"content-type": "text/plain", **headers})
        assert r.status_code == 403, headers
    r = client.post(
        "/triage?release=0.5.11",
        content=log,
        headers={"origin": server.url, "sec-fetch-site": "same-origin"},
    )
    assert r.status_code == 200
    for host in ("evil.example", "rebind.attacker.test:8000"):
        assert client.get("/healthz", headers={"host": host}).status_code == 400
        assert client.post("/triage", content=log, headers={"host": host}).status_code == 400


def test_a_slow_body_is_timed_out(server, monkeypatch) -> None:
    from service.api import guard

    monkeypatch.setattr(guard, "BODY_TIMEOUT_S", 1.0)

    def slow():
        yield b"Traceback"
        time.sleep(3)
        yield b" (most recent call last)\n"

    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/triage", content=slow(), headers={"content-type": "text/plain"})
    assert r.status_code == 408


# ------------------------------------------------------------------ small items


def test_bad_hardware_names_and_non_versions_are_refused(client: httpx.Client) -> None:
    log = _log()
    for hw in ("h100-x0", "h100-x999"):
        assert client.post(f"/triage?hardware={hw}", content=log).status_code == 400, hw
    r = client.post("/triage?release=banana", content=log)
    assert r.status_code == 422 and "not an SGLang version" in r.json()["detail"]
    r = client.post("/triage?release=0.5.10", content=log)  # a version the KB lacks: noted
    assert r.status_code == 200 and "not ingested" in (r.json()["release"].get("note") or "")


def test_the_replay_queue_is_bounded_and_fair() -> None:
    from service.replay.queue import QueueFull, ReplayQueue

    gate = threading.Event()
    order: list[str] = []
    q = ReplayQueue(max_pending=4, per_client=2)
    first = q.submit("a", gate.wait)  # occupies the worker
    time.sleep(0.2)
    futs = [q.submit("a", order.append, "a1"), q.submit("a", order.append, "a2")]
    with pytest.raises(QueueFull, match="this client"):
        q.submit("a", order.append, "a3")
    futs += [q.submit("b", order.append, "b1"), q.submit("c", order.append, "c1")]
    with pytest.raises(QueueFull, match="4 batches"):
        q.submit("d", order.append, "d1")
    gate.set()
    for f in [first, *futs]:
        f.result(timeout=10)
    assert order == ["a1", "b1", "c1", "a2"]  # round-robin, not first come first served


def test_purge_keeps_confirmed_triages(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    records = Records(tmp_path / "records.sqlite")
    for i in range(6):
        records.save(f"t{i}", {"log": "x"}, {"summary": str(i)})
    con = sqlite3.connect(tmp_path / "records.sqlite")
    old = (datetime.now(timezone.utc) - timedelta(days=40)).isoformat(timespec="seconds")
    con.execute("UPDATE triages SET created = ? WHERE id IN ('t0', 't1')", (old,))
    con.commit()
    con.close()
    assert records.confirm("t0", {"rank": 1})
    assert records.purge(max_age_days=30, max_count=None) == 1  # t1; t0 is confirmed
    assert records.get("t0") is not None and records.get("t1") is None
    assert records.purge(max_age_days=None, max_count=2) == 2  # oldest unconfirmed beyond 2
    assert {r for r in ("t0", "t2", "t3", "t4", "t5") if records.get(r)} == {"t0", "t4", "t5"}
    assert records.purge(max_age_days=30, max_count=None, keep_confirmed=False) == 1
    assert records.get("t0") is None and json.loads(json.dumps(records.confirmed())) == []


def _wait_replay(c: httpx.Client, tid: str, budget_s: float = 300) -> dict:
    deadline = time.monotonic() + budget_s
    stored: dict = {}
    while time.monotonic() < deadline:
        stored = c.get(f"/triage/{tid}").json()["result"]
        if stored.get("replay", {}).get("status") != "pending":
            break
        time.sleep(1)
    return stored


def test_a_logged_model_folder_with_remote_code_is_never_run(
    api_settings: Settings, tmp_path: Path
) -> None:
    """The auto_map payload (a --model-path folder with config.json naming a .py, plus
    --trust-remote-code) and the --config YAML route: replay refuses or drops them, the
    payload writes nothing, and the stored answer says why."""
    marker = tmp_path / "pwned"
    folder = tmp_path / "evil-model"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3",
                "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.Evil"},
            }
        )
    )
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (tmp_path / "cfg.yaml").write_text(f"model-path: {folder}\ntrust-remote-code: true\n")
    log = _log()
    first_cmd = log.splitlines()[0]
    attempts = {
        "auto_map": first_cmd.replace(first_cmd.split("--model-path ")[1].split()[0], str(folder))
        + " --trust-remote-code",
        "config": first_cmd.replace(
            "--model-path", f"--config {tmp_path / 'cfg.yaml'} --model-path", 1
        ).replace(first_cmd.split("--model-path ")[1].split()[0], "deepseek-ai/DeepSeek-V3"),
    }
    on = api_settings.model_copy(update={"replay_enabled": True})
    with make_server(on) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        stored = {}
        for name, cmd in attempts.items():
            body = {
                "log": log.replace(first_cmd, cmd, 1),
                "release": "0.5.11",
                "hardware": "rtx-pro-6000-x8",
            }
            r = c.post("/triage", json=body)
            assert r.status_code == 200, r.text
            stored[name] = _wait_replay(c, r.json()["id"])
    assert not marker.exists()
    # the folder's config.json is read as data only (whitelisted fields, no auto_map, no code):
    # knowing its architecture, replay runs the release on a generated stand-in folder of that
    # architecture; without it, replay refuses. Either way the payload never runs.
    auto = stored["auto_map"]
    assert auto["replay"]["status"] != "pending"
    from_config = any(
        f["name"] == "architecture"
        and f["source"] == "config.json"
        and f["value"] == "DeepseekV3ForCausalLM"
        for f in auto["model_facts"]
    )
    assert from_config or ("replay refused" in auto["replay"]["detail"])
    assert "auto_map" not in json.dumps(auto["model_facts"])
    assert stored["config"]["replay"]["status"] != "pending"
    assert str(folder) not in json.dumps(stored["config"]["replay"])


def test_readyz_reports_the_replay_sandbox(client: httpx.Client) -> None:
    from service.replay.sandbox import status

    body = client.get("/readyz").json()
    assert body["replay"]["sandbox"] is status().available
    assert body["replay"]["detail"] == status().reason


def test_ingest_does_not_follow_links_out_of_the_package(tmp_path: Path) -> None:
    from kb.sources import ReleaseSource, iter_python_files

    pkg = tmp_path / "src" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "srt" / "server_args.py").write_text("x = 1\n")
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'do-not-index'\n")
    (pkg / "srt" / "leak.py").symlink_to(secret)
    (pkg / "srt" / "alias.py").symlink_to(pkg / "srt" / "server_args.py")
    src = ReleaseSource(version="0.0.1", root=tmp_path / "src", origin="test")
    names = [p.name for p in iter_python_files(src)]
    assert "leak.py" not in names and {"server_args.py", "alias.py"} <= set(names)


def test_purge_records_command(api_settings: Settings, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from service.cli.main import app

    kb_dir = tmp_path / "kb"
    records = Records(kb_dir / "records.sqlite")
    for i in range(3):
        records.save(f"p{i}", {"log": "x"}, {"summary": str(i)})
    assert records.confirm("p0", {"rank": 1})
    env = {"TRIAGE_KB_DIR": str(kb_dir), "TRIAGE_HOME": str(api_settings.home)}
    res = CliRunner().invoke(app, ["purge-records", "--max-count", "0"], env=env)
    assert res.exit_code == 0, res.output
    assert records.get("p0") is not None and records.get("p1") is None and records.count() == 1
    res = CliRunner().invoke(
        app, ["purge-records", "--max-count", "0", "--include-confirmed"], env=env
    )
    assert res.exit_code == 0 and records.count() == 0
