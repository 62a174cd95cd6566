"""POST /triage on a frameless log: the release range and the later releases, over HTTP."""

from __future__ import annotations

import httpx

from service.engine.release.range import span
from service.engine.release.versions import release_sort_key
from tests.service.engine.release.test_range import _message_held_by_some


def test_triage_of_a_message_only_log_answers_a_release_range(client: httpx.Client, kb) -> None:
    store = kb.store
    ingested = sorted((r["version"] for r in store.releases()), key=release_sort_key)
    exc, text, holders = _message_held_by_some(store, ingested)
    r = client.post("/triage", content=f"{exc}: {text}\n", headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    body = r.json()
    rng = body["release"]["range"]
    assert rng["releases"] == holders and (rng["first"], rng["last"]) == (holders[0], holders[-1])
    assert body["release"]["release"] == holders[-1]
    assert any(
        p["kind"] == "message" and span(holders, ingested) in p["text"] for p in rng["evidence"]
    )
    assert "later_releases" in body and "upgrade" in body
    for change in body["later_releases"]:
        assert change["release"] not in holders[:-1]
    assert "Release range" in body["explanation"]
