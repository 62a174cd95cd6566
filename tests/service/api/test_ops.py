"""Operations routes over real HTTP: ``/metrics``, ``/version``, the OpenAPI answer model, and
the request id in the JSON log lines written while a request is served.

Most tests need no KB (an empty folder); the triage-stage test indexes 0.5.11's structure
into a folder of its own (about half a minute, no embeddings).
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import wait
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.api import metrics
from service.api.app import app_settings, create_app
from service.api.logs import JsonFormatter
from service.settings import Settings

from .conftest import ServerThread, free_port, make_server

ROOT = Path(__file__).resolve().parents[3]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def drain_replay_queue() -> None:
    """Wait until the process's replay queue has run every batch submitted so far. One
    pytest worker runs many test files, and a server of an earlier file (replay on) may have
    left batches in this process-wide queue; they would move the counters read here. The
    queue runs one batch at a time, in order, so once nothing waits, a no-op submitted now
    ends after every batch before it."""
    from service.replay.harness import QUEUE

    for _ in range(3600):  # bounded: at most ~30 minutes of others' batches
        if not QUEUE.depth():
            break
        time.sleep(0.5)
    QUEUE.submit("drain", lambda: None).result(timeout=1800)


@pytest.fixture()
def empty(tmp_path: Path) -> Settings:
    """Settings on an empty KB folder: enough for routes that do not read the KB."""
    return Settings(
        kb_dir=tmp_path / "kb", replay_enabled=False, on_demand_ingest=False, api_keys=[]
    )


def test_metrics_count_requests_by_route_template_not_raw_path(empty: Settings) -> None:
    drain_replay_queue()
    with make_server(empty) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        before = c.get("/metrics").text
        for tid in ("aaaa1111", "bbbb2222", "cccc3333"):
            assert c.get(f"/triage/{tid}").status_code == 404
        assert c.get("/no/such/route").status_code == 404
        assert c.get("/static/app.js").status_code == 200
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    labels = {"method": "GET", "route": "/triage/{tid}", "status": "404"}
    assert (
        value(text, "sglang_triage_http_requests_total", **labels)
        - value(before, "sglang_triage_http_requests_total", **labels)
        == 3
    )
    assert (
        value(text, "sglang_triage_http_request_duration_seconds_count", **labels)
        - value(before, "sglang_triage_http_request_duration_seconds_count", **labels)
        == 3
    )
    routes = {
        dict(k[1]).get("route")
        for k in samples(text)
        if k[0] == "sglang_triage_http_requests_total"
    }
    assert {"<unmatched>", "/static/*", "/metrics"} <= routes
    assert not [r for r in routes if "aaaa1111" in r or "/no/such" in r]  # no raw paths
    assert value(text, "sglang_triage_build_info", version=version("sglang-triage")) == 1
    assert value(text, "sglang_triage_replay_queue_depth") == 0
    assert value(text, "sglang_triage_replay_pool_waiting") == 0
    assert "process_resident_memory_bytes" in text


def test_metrics_need_the_key_when_keys_are_set_and_version_does_not(empty: Settings) -> None:
    locked = empty.model_copy(update={"api_keys": ["m-key"]})
    with make_server(locked) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
        ok = c.get("/metrics", headers={"authorization": "Bearer m-key"})
        assert ok.status_code == 200 and "sglang_triage_http_requests_total" in ok.text
        assert c.get("/version").json() == {
            "name": "sglang-triage",
            "version": version("sglang-triage"),
        }


def test_the_version_and_the_triage_answer_model_are_in_the_openapi_document(
    empty: Settings,
) -> None:
    with make_server(empty) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        spec = c.get("/openapi.json").json()
    assert spec["info"]["version"] == version("sglang-triage")
    ok = spec["paths"]["/triage"]["post"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"] == {"$ref": "#/components/schemas/TriageResult"}
    answer = spec["components"]["schemas"]["TriageResult"]["properties"]
    assert {"release", "location", "fixes", "timings_ms"} <= set(answer)
    assert "/metrics" in spec["paths"] and "/version" in spec["paths"]


def test_replay_queue_jobs_are_timed_and_counted(empty: Settings) -> None:
    from service.replay.harness import QUEUE

    def boom() -> None:
        raise RuntimeError("harness broke")

    drain_replay_queue()
    with make_server(empty) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        before = c.get("/metrics").text
        done = [QUEUE.submit("metrics-test", sum, [1, 2]), QUEUE.submit("metrics-test", boom)]
        wait(done, timeout=30)
        assert done[0].result() == 3 and isinstance(done[1].exception(), RuntimeError)
        text = c.get("/metrics").text
    for outcome in ("ok", "error"):
        assert (
            value(text, "sglang_triage_replay_jobs_total", outcome=outcome)
            - value(before, "sglang_triage_replay_jobs_total", outcome=outcome)
            == 1
        )
    assert (
        value(text, "sglang_triage_replay_job_seconds_count")
        - value(before, "sglang_triage_replay_job_seconds_count")
        == 2
    )


def test_cache_collector_reports_hits_misses_and_entries() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(
        metrics.CacheCollector(
            lambda: {"rules.card_verdicts": {"size": 3, "max": 10, "hits": 7, "misses": 2}}
        )
    )
    text = generate_latest(registry).decode()
    assert value(text, "sglang_triage_engine_cache_hits_total", cache="rules.card_verdicts") == 7
    assert value(text, "sglang_triage_engine_cache_misses_total", cache="rules.card_verdicts") == 2
    assert value(text, "sglang_triage_engine_cache_entries", cache="rules.card_verdicts") == 3


def test_pool_collector_reports_workers_queue_and_memory() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from service.replay.pool import WarmPool

    pool = WarmPool()
    registry = CollectorRegistry()
    registry.register(metrics.PoolCollector(pool.stats))
    text = generate_latest(registry).decode()
    assert value(text, "sglang_triage_replay_pool_workers") == 0
    assert value(text, "sglang_triage_replay_pool_jobs_total") == 0
    pool.close()
    machine = "nvidia:NVIDIA B200:sm100:cuda12.9"
    workers = [
        {
            "release": "0.5.23",
            "machine": machine,
            "vendor": "nvidia",
            "alive": True,
            "rss_mib": 417.0,
            "start_s": 17.1,
        },
        {
            "release": "0.5.23",
            "machine": machine.replace("B200:sm100", "H100:sm90"),
            "vendor": "nvidia",
            "alive": True,
            "rss_mib": 401.0,
            "start_s": 15.0,
        },
    ]
    registry = CollectorRegistry()
    registry.register(
        metrics.PoolCollector(
            lambda: {"workers": workers, "queue_depth": 2, "jobs_served": 9, "refused": 1}
        )
    )
    text = generate_latest(registry).decode()
    assert value(text, "sglang_triage_replay_pool_workers") == 2  # one release, two GPU models
    assert value(text, "sglang_triage_replay_pool_waiting") == 2
    assert value(text, "sglang_triage_replay_pool_refused_total") == 1
    assert (
        value(text, "sglang_triage_replay_pool_worker_rss_mib", release="0.5.23", machine=machine)
        == 417.0
    )


@pytest.fixture()
def captured() -> Iterator[io.StringIO]:
    """JSON lines written by the ``sglang_triage`` loggers while the test runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("sglang_triage")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def test_log_lines_written_while_serving_carry_the_request_id(
    empty: Settings, captured: io.StringIO
) -> None:
    app = create_app(empty)
    app.dependency_overrides[app_settings] = lambda: empty

    @app.get("/probe-log")
    def probe() -> dict[str, bool]:  # a sync route: runs on a worker thread
        logging.getLogger("sglang_triage.probe").warning("deep inside %s", "a route")
        return {"ok": True}

    with ServerThread(app, free_port()) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.get("/probe-log", headers={"x-request-id": "rid-42"}).status_code == 200
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    app_line = next(x for x in lines if x["logger"] == "sglang_triage.probe")
    assert app_line["msg"] == "deep inside a route" and app_line["request_id"] == "rid-42"
    assert app_line["level"] == "WARNING" and app_line["ts"].endswith("Z")
    access = next(x for x in lines if x["logger"] == "sglang_triage.access")
    assert {
        "request_id": "rid-42",
        "method": "GET",
        "path": "/probe-log",
        "status": 200,
        "client": "127.0.0.1",
    }.items() <= access.items()
    assert isinstance(access["duration_ms"], float)


@pytest.fixture(scope="module")
def one_release(sglang_source, tmp_path_factory) -> Settings:
    """A KB holding 0.5.11's structure only, in a folder of its own."""
    from ingest.pipeline import index_structure
    from kb.knowledge import KnowledgeBase

    settings = Settings(
        kb_dir=tmp_path_factory.mktemp("ops-kb"),
        replay_enabled=False,
        on_demand_ingest=False,
        on_demand_embed=False,
        api_keys=[],
    )
    kb = KnowledgeBase(settings)
    index_structure(kb, sglang_source("0.5.11"))
    kb.close()
    return settings


def test_each_triage_observes_its_stage_timings(one_release: Settings) -> None:
    log = (ROOT / "examples" / "seed_attempt1.log").read_bytes()
    with make_server(one_release) as srv, httpx.Client(base_url=srv.url, timeout=300) as c:
        before = c.get("/metrics").text
        r = c.post(
            "/triage",
            params={"release": "0.5.11"},
            content=log,
            headers={"content-type": "text/plain"},
        )
        assert r.status_code == 200, r.text
        answer = r.json()
        text = c.get("/metrics").text
    assert answer["status"] == "located" and {"parse", "locate", "total"} <= set(
        answer["timings_ms"]
    )
    for stage in answer["timings_ms"]:
        assert (
            value(text, "sglang_triage_triage_stage_seconds_count", stage=stage)
            - value(before, "sglang_triage_triage_stage_seconds_count", stage=stage)
            == 1
        )
    assert (
        value(text, "sglang_triage_triages_total", status="located")
        - value(before, "sglang_triage_triages_total", status="located")
        == 1
    )
    labels = {"method": "POST", "route": "/triage", "status": "200"}
    assert (
        value(text, "sglang_triage_http_requests_total", **labels)
        - value(before, "sglang_triage_http_requests_total", **labels)
        == 1
    )
    # the triage went through the engine's memo tables: their lookups are counted
    caches = [
        line
        for line in text.splitlines()
        if line.startswith(
            ("sglang_triage_engine_cache_hits_total{", "sglang_triage_engine_cache_misses_total{")
        )
    ]
    assert caches and sum(float(line.rsplit(" ", 1)[1]) for line in caches) > 0
