"""HTTP tests against the real app over real loopback HTTP."""

from __future__ import annotations

import json

import httpx
import pytest

from evals.render import render_log

from .conftest import make_server

SEED_ARGV = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/d",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]


def _seed_log(kb) -> str:
    check = next(
        c
        for c in kb.store.checks("0.5.11", function="ServerArgs._handle_speculative_decoding")
        if c.bare
    )
    return render_log(kb.store, "0.5.11", check, argv=SEED_ARGV)


def test_health_and_ready(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert {"0.5.9", "0.5.11", "0.5.23"} <= set(body["releases"]) and body["chroma"] == "ok"


def test_triage_text_plain_returns_the_check_and_a_fix(client: httpx.Client, kb) -> None:
    r = client.post(
        "/triage?release=0.5.11",
        content=_seed_log(kb),
        headers={"content-type": "text/plain", "x-request-id": "abc123"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == "abc123"
    body = r.json()
    assert body["location"]["function"] == "ServerArgs._handle_speculative_decoding"
    assert body["fixes"][0]["recommended"] is True
    assert body["id"]
    stored = client.get(f"/triage/{body['id']}")
    assert stored.status_code == 200 and stored.json()["result"]["summary"] == body["summary"]
    assert stored.json()["result"] == body  # the stored answer is the one sent


def test_request_ids_are_echoed_only_when_plain(client: httpx.Client) -> None:
    assert (
        client.get("/healthz", headers={"x-request-id": "run-7:a.b"}).headers["x-request-id"]
        == "run-7:a.b"
    )
    for bad in ("x" * 65, "a;b", "<script>"):
        rid = client.get("/healthz", headers={"x-request-id": bad}).headers["x-request-id"]
        assert rid != bad and len(rid) == 12
    assert len(client.get("/healthz").headers["x-request-id"]) == 12
    # error answers carry one too
    assert client.get("/triage/nope").headers["x-request-id"]


def test_triage_json_body_with_hardware(client: httpx.Client, kb) -> None:
    r = client.post(
        "/triage", json={"log": _seed_log(kb), "release": "0.5.11", "hardware": "rtx-pro-6000-x8"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["parsed"]["hardware"] == "rtx-pro-6000-x8"


def test_confirm_records_the_fix(client: httpx.Client, kb) -> None:
    body = client.post("/triage?release=0.5.11", content=_seed_log(kb)).json()
    fix = {"remove": body["fixes"][0]["remove"], "set": body["fixes"][0]["set"]}
    r = client.post(f"/incidents/{body['id']}/confirm", json={"fix": fix, "note": "worked"})
    assert r.status_code == 200 and r.json()["confirmed"] is True
    rec = client.get(f"/triage/{body['id']}").json()
    assert rec["confirmation"]["fix"] == fix
    assert client.post("/incidents/nope/confirm", json={"fix": {}}).status_code == 404
    # a later crash in the same check shows the confirmed fix as a similar past incident
    check = next(
        c
        for c in kb.store.checks("0.5.11", function="ServerArgs._handle_speculative_decoding")
        if c.bare
    )
    other = render_log(kb.store, "0.5.11", check, python="3.11", argv=SEED_ARGV[:-2])
    later = client.post("/triage?release=0.5.11", content=other).json()
    # an open service does not link other people's triages: the fix is shown, not the id
    assert any(s["confirmed_fix"] == fix and "id" not in s for s in later["similar"])
    # the confirmation exports as an eval incident (JSONL), filtered by front end
    exported = client.get("/incidents")
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in exported.text.splitlines()]
    offset = len(rows)  # the suite's records outlive a run: page on to the newest
    while rows and not any(r["id"] == f"rec-{body['id']}" for r in rows[-100:]):
        page = client.get(f"/incidents?offset={offset}").text.splitlines()
        if not page:
            break
        rows += [json.loads(line) for line in page]
        offset += len(page)
    mine = next(r for r in rows if r["id"] == f"rec-{body['id']}")
    assert mine["confirmed_by"] == f"api:{body['id']}"
    assert mine["expected"]["acceptable_fixes"] == [fix]
    assert all(
        r["id"] != mine["id"]
        for r in map(json.loads, client.get("/incidents?source=web").text.splitlines())
    )
    assert client.get("/incidents?source=nope").status_code == 422


def test_bad_inputs_get_clear_4xx(client: httpx.Client, api_settings) -> None:
    empty = client.post("/triage", content=b"   \n", headers={"content-type": "text/plain"})
    assert empty.status_code == 400 and "empty" in empty.json()["detail"]
    binary = client.post(
        "/triage", content=b"\x00\x01\x02log", headers={"content-type": "text/plain"}
    )
    assert binary.status_code == 415
    not_utf8 = client.post(
        "/triage", content="caf\xe9".encode("latin-1"), headers={"content-type": "text/plain"}
    )
    assert not_utf8.status_code == 415
    huge = client.post(
        "/triage",
        content=b"x" * (api_settings.max_body_bytes + 10),
        headers={"content-type": "text/plain"},
    )
    assert huge.status_code == 413
    nothing = client.post(
        "/triage",
        content=b"server started fine\nall good\n",
        headers={"content-type": "text/plain"},
    )
    assert nothing.status_code == 422
    assert "understood" in nothing.json()
    bad_json = client.post(
        "/triage", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 422
    bad_hw = client.post(
        "/triage?hardware=tpu-v9",
        content=b"Traceback (most recent call last):\n"
        b'  File "/x/sglang/srt/server_args.py", line 3519, in _handle_speculative_decoding\n'
        b"AssertionError\n",
    )
    assert bad_hw.status_code == 400


def test_unknown_release_is_404(client: httpx.Client) -> None:
    r = client.get("/search", params={"q": "topk", "release": "9.9.9"})
    assert r.status_code == 404 and "9.9.9" in r.json()["detail"]


def test_search_and_releases(client: httpx.Client) -> None:
    hits = client.get(
        "/search", params={"q": "trtllm_mha topk", "release": "0.5.11", "k": 3}
    ).json()
    assert len(hits["hits"]) == 3 and hits["hits"][0]["citation"].startswith("0.5.11:")
    assert {r["version"] for r in client.get("/releases").json()} >= {"0.5.11", "0.5.23"}


def test_openapi_docs_have_examples(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/triage"]["post"]["requestBody"]["content"]
    assert "text/plain" in body and "example" in body["application/json"]
    assert client.get("/docs").status_code == 200


def test_api_keys_guard_everything_but_health(api_settings, kb) -> None:
    locked = api_settings.model_copy(update={"api_keys": ["s3cret"]})
    with make_server(locked) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/releases").status_code == 401
        assert c.get("/releases", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/releases", headers={"authorization": "Bearer s3cret"}).status_code == 200


def test_lint_flags_the_seed_command_and_rules_are_listed(client: httpx.Client) -> None:
    r = client.post(
        "/lint",
        json={
            "release": "0.5.11",
            "hardware": "rtx-pro-6000-x8",
            "command": "python -m sglang.launch_server " + " ".join(SEED_ARGV),
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    cited = [c for f in body["violated"] for c in f["citations"]]
    assert any("_handle_speculative_decoding" in c and ":3519-3522" in c for c in cited)
    rules = client.get("/rules", params={"release": "0.5.11", "origin": "curated"}).json()
    assert rules["count"] >= 1 and all(c["origin"] == "curated" for c in rules["cards"])


def test_every_fix_carries_rule_verdicts(client: httpx.Client, kb) -> None:
    body = client.post(
        "/triage?release=0.5.11&hardware=rtx-pro-6000-x8", content=_seed_log(kb)
    ).json()
    recommended = [f for f in body["fixes"] if f["recommended"]]
    assert len(recommended) == 1
    assert not any(
        v["verdict"] == "violated" and v["severity"] == "error"
        for v in recommended[0]["rule_verdicts"]
    )


def test_triage_verifies_the_crash_and_fixes_by_replay_in_the_background(
    api_settings,
    kb,
    monkeypatch,
) -> None:
    """The answer does not wait for the replay: the replay is held until the answer has
    arrived (a fast path that waited for it would never answer: the client times out),
    then runs for real and its verdicts land in the stored triage."""
    import threading
    import time

    from service.replay import harness

    events: list[str] = []
    answered = threading.Event()
    real = harness.replay_many

    def held(*args, **kwargs):
        events.append("replay started")
        answered.wait(300)  # only a deadlock breaker: released as soon as the answer arrived
        try:
            return real(*args, **kwargs)
        finally:
            events.append("replay finished")

    monkeypatch.setattr(harness, "replay_many", held)  # what the queue runs (replay_async)
    on = api_settings.model_copy(update={"replay_enabled": True})
    with make_server(on) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        try:
            first = c.post(
                "/triage?release=0.5.11&hardware=rtx-pro-6000-x8&model_arch=DeepseekV3ForCausalLM",
                content=_seed_log(kb),
            )
        except httpx.ReadTimeout:
            pytest.fail("no answer while the replay was held: the fast path waits for it")
        finally:
            events.append("answered")
            answered.set()
        assert first.status_code == 200
        assert first.json()["replay"]["status"] == "pending"
        tid = first.json()["id"]
        deadline = time.monotonic() + 400
        stored = {}
        while time.monotonic() < deadline:
            stored = c.get(f"/triage/{tid}").json()["result"]
            if stored.get("replay", {}).get("status") != "pending":
                break
            time.sleep(2)
        assert stored["replay"]["status"] == "reproduced", stored["replay"]
        # the fast path did not wait for the replay: answered while it was held
        assert "replay finished" in events, events  # the replay ran through the hold
        assert events.index("answered") < events.index("replay finished"), events
        top = stored["fixes"][0]
        assert top["replay"]["status"] == "verified"
        assert "verified by replay on 0.5.11 with rtx-pro-6000-x8" in top["replay"]["detail"]


def test_a_replay_that_finishes_at_once_is_not_overwritten(
    api_settings, kb, tmp_path, monkeypatch
) -> None:
    """A replay answered from its disk cache can store its verdicts before the request
    returns; the "pending" record must already be stored by then, never after."""
    from concurrent.futures import Future

    from kb.records import Records
    from service.engine.triage import Engine
    from service.replay import background as verify
    from service.usecase import Keep, TriageRequest, TriageUseCase

    def instant(settings, result, argv, hardware, model_arch, on_done, client="local"):
        assert result["replay"]["status"] == "pending"
        on_done(result | {"replay": {"status": "reproduced", "detail": "from the cache"}})
        fut: Future = Future()
        fut.set_result([])
        return fut

    monkeypatch.setattr(verify, "schedule", instant)
    records = Records(tmp_path / "records.sqlite")
    settings = api_settings.model_copy(update={"replay_enabled": True})
    text = _seed_log(kb)
    usecase = TriageUseCase(Engine(kb, settings), settings, records)
    stored = usecase.answer_and_store(TriageRequest(text, release="0.5.11"), Keep(owner=None))
    body = json.loads(stored.encoded)
    assert body["replay"]["status"] == "pending"
    assert records.get(body["id"])["result"]["replay"] == {
        "status": "reproduced",
        "detail": "from the cache",
    }
