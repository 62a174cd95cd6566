"""The triage use case (:mod:`service.usecase`): one parse per request, the answer the engine
gives, and the record, ``similar`` and background replay a storing front end gets."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evals.render import render_log
from kb.records import Records
from service.engine import Engine
from service.settings import Settings
from service.usecase import Keep, TriageRequest, TriageUseCase

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


@pytest.fixture(scope="module")
def settings(kb_settings: Settings, kb) -> Settings:
    """The suite's KB, without background replay, on-demand ingest or rate limits."""
    return kb_settings.model_copy(
        update={"replay_enabled": False, "on_demand_ingest": False, "triage_rate_per_minute": 0.0}
    )


@pytest.fixture(scope="module")
def seed_log(kb) -> str:
    check = next(
        c
        for c in kb.store.checks("0.5.11", function="ServerArgs._handle_speculative_decoding")
        if c.bare
    )
    return render_log(kb.store, "0.5.11", check, argv=SEED_ARGV)


@pytest.fixture()
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of :func:`parse_input`, wherever it is looked up: each loaded module that
    bound the function gets a counting wrapper in its place."""
    import service.api.app
    import service.usecase.triage
    from service.engine.logparse import parse as home

    real = home.parse_input
    calls: list[str] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append("parse_input")
        return real(*args, **kwargs)

    patched = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("service", "kb", "evals")):
            continue
        if getattr(module, "parse_input", None) is real:
            monkeypatch.setattr(module, "parse_input", counting)
            patched.append(name)
    assert service.usecase.triage.__name__ in patched  # the use case's own look-up is counted
    assert len(patched) > 2  # and the engine's
    return calls


def test_one_request_parses_the_log_once(settings, kb, seed_log, parses) -> None:
    result = TriageUseCase(Engine(kb, settings), settings).answer(
        TriageRequest(seed_log, release="0.5.11")
    )
    assert result.status == "located"
    assert result.location is not None
    assert result.location.function == "ServerArgs._handle_speculative_decoding"
    assert parses == ["parse_input"]


def test_post_triage_parses_the_log_once(settings, tmp_path, seed_log, parses) -> None:
    from service.api.app import app_settings, create_app, get_records

    app = create_app(settings)
    records = Records(tmp_path / "records.sqlite")
    app.dependency_overrides[app_settings] = lambda: settings
    app.dependency_overrides[get_records] = lambda: records
    with TestClient(app, base_url="http://127.0.0.1") as client:
        r = client.post(
            "/triage", content=seed_log.encode(), headers={"content-type": "text/plain"}
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "located"
    assert records.get(body["id"])["result"]["id"] == body["id"]
    assert parses == ["parse_input"]


def test_the_same_answer_through_answer_and_through_the_store(
    settings: Settings, kb, tmp_path, seed_log: str
) -> None:
    usecase = TriageUseCase(Engine(kb, settings), settings, Records(tmp_path / "r.sqlite"))
    plain = usecase.answer(TriageRequest(seed_log, release="0.5.11"))
    kept = usecase.answer_and_store(TriageRequest(seed_log, release="0.5.11"), Keep(owner="me"))
    assert kept.stored and kept.result.id == kept.tid
    assert [f.command for f in kept.result.fixes] == [f.command for f in plain.fixes]
    assert kept.result.location == plain.location
    assert plain.id is None  # only a stored answer has an id


def test_a_stored_answer_keeps_the_request_its_owner_and_the_front_ends_fields(
    settings: Settings, kb, tmp_path, seed_log: str
) -> None:
    records = Records(tmp_path / "records.sqlite")
    usecase = TriageUseCase(Engine(kb, settings), settings, records)
    secret = "hf_" + "A" * 34
    log = seed_log + f"\nHF_TOKEN={secret}\n"
    kept = usecase.answer_and_store(
        TriageRequest(log, hardware="h100-x8", client="slack:U1"),
        Keep(owner="slack:U1", record={"source": "slack", "slack": {"user": "U1"}}),
    )
    rec = records.get(kept.tid)
    assert rec is not None and records.owners(kept.tid)[0] == "slack:U1"
    request = rec["request"]
    assert request["options"] == {
        "release": None,
        "hardware": "h100-x8",
        "model": None,
        "model_arch": None,
    }
    assert request["source"] == "slack" and request["slack"] == {"user": "U1"}
    assert secret not in json.dumps(rec) and secret not in kept.encoded  # redacted once, early
    assert json.loads(kept.encoded) == rec["result"]  # the same text stored and returned


def test_similar_links_only_the_triages_show_id_allows(
    settings: Settings, kb, tmp_path, seed_log: str
) -> None:
    records = Records(tmp_path / "records.sqlite")
    usecase = TriageUseCase(Engine(kb, settings), settings, records)
    ask = TriageRequest(seed_log, release="0.5.11")
    mine = usecase.answer_and_store(ask, Keep(owner="a"))
    theirs = usecase.answer_and_store(ask, Keep(owner="b"))
    for kept, owner in ((mine, "a"), (theirs, "b")):
        fix = kept.result.fixes[0].model_dump(mode="json")
        assert records.confirm(kept.tid, fix, "it worked", source="api", owner=owner)
    linked = usecase.answer_and_store(ask, Keep(owner="a", show_id=lambda owner: owner == "a"))
    ids = {s.model_dump().get("id") for s in linked.result.similar}
    assert len(linked.result.similar) == 2
    assert ids == {mine.tid, None}  # b's triage is listed without its id
    unlinked = usecase.answer_and_store(ask, Keep(owner="c"))  # default: never an id
    assert {s.model_dump().get("id") for s in unlinked.result.similar} == {None}


def test_a_nearly_full_disk_answers_without_storing(
    settings: Settings, kb, tmp_path, seed_log: str
) -> None:
    full = settings.model_copy(update={"records_min_free_bytes": 1 << 62})
    records = Records(tmp_path / "records.sqlite")
    kept = TriageUseCase(Engine(kb, full), full, records).answer_and_store(
        TriageRequest(seed_log, release="0.5.11"), Keep(owner="a")
    )
    assert not kept.stored and kept.result.id is None
    assert records.get(kept.tid) is None
    assert any("not stored" in d for d in kept.result.degraded)
    assert kept.result.status == "located"


def _instant_replay(seen: list[dict[str, Any]]) -> Callable[..., Future]:
    def schedule(settings, result, argv, hardware, model_arch, on_done, client="local"):
        seen.append({"status": result["replay"]["status"], "client": client, "argv": argv})
        on_done(result | {"replay": {"status": "reproduced", "detail": "from the cache"}})
        fut: Future = Future()
        fut.set_result([])
        return fut

    return schedule


def test_a_slack_style_keep_schedules_the_background_replay_too(
    settings: Settings, kb, tmp_path, seed_log: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Slack bot keeps its answers as the API does: the background replay is scheduled
    on its asker's share of the queue, and its verdicts land in the stored record."""
    from service.replay import background

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(background, "schedule", _instant_replay(seen))
    on = settings.model_copy(update={"replay_enabled": True, "fix_search_deadline_s": 0.0})
    records = Records(tmp_path / "records.sqlite")
    kept = TriageUseCase(Engine(kb, on), on, records).answer_and_store(
        TriageRequest(seed_log, release="0.5.11", client="slack:U1"),
        Keep(owner="slack:U1", replay_client="slack:U1", late_updates=False),
    )
    assert kept.result.replay["status"] == "pending"
    assert seen and seen[0]["status"] == "pending" and seen[0]["client"] == "slack:U1"
    assert "--speculative-eagle-topk" in seen[0]["argv"]
    assert records.get(kept.tid)["result"]["replay"]["status"] == "reproduced"


def test_no_replay_asked_none_scheduled(
    settings: Settings, kb, tmp_path, seed_log: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.replay import background

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(background, "schedule", _instant_replay(seen))
    on = settings.model_copy(update={"replay_enabled": True, "fix_search_deadline_s": 0.0})
    kept = TriageUseCase(Engine(kb, on), on, Records(tmp_path / "r.sqlite")).answer_and_store(
        TriageRequest(seed_log, release="0.5.11", replay=False), Keep(owner="a")
    )
    assert seen == [] and (kept.result.replay or {}).get("status") != "pending"


def test_answer_and_store_needs_records(settings: Settings, kb, seed_log: str) -> None:
    with pytest.raises(TypeError, match="records"):
        TriageUseCase(Engine(kb, settings), settings).answer_and_store(
            TriageRequest(seed_log), Keep(owner=None)
        )


def test_wanted_release_reads_the_parse_it_is_given(kb, seed_log: str, parses) -> None:
    from service import engine
    from service.ondemand import wanted_release

    parsed = engine.parse_input(seed_log)
    parses.clear()
    assert wanted_release(parsed, None, kb) is None  # 0.5.11 is in the KB
    assert wanted_release(parsed, "0.4.0", kb) == "0.4.0"  # named, and not in the KB
    assert wanted_release(parsed, "not a version", kb) is None
    assert parses == []  # it parsed nothing itself
