"""Prometheus metrics of one API process, served at ``GET /metrics`` (text format).

What is measured (all names start with ``sglang_triage_``):

``http_requests_total{method,route,status}`` and ``http_request_duration_seconds{...}``
    every HTTP request, by *route template* (``/triage/{tid}``, never the raw path, so a
    client cannot grow the label set); a path no route matches is ``<unmatched>`` and one a
    mounted app serves (static files, docs assets) is the mount's path plus ``/*``.
``triage_stage_seconds{stage}``, ``triages_total{status}``
    the per-stage timings every triage answer carries (``timings_ms``: parse, resolve,
    locate, evaluate, fixes, rules, llm, total), observed after each ``POST /triage``.
``replay_queue_depth``, ``replay_jobs_total{outcome}``, ``replay_job_seconds``
    the background replay queue: batches waiting, and each batch's run time once it ends.
``replay_pool_workers``, ``replay_pool_waiting``, ``replay_pool_jobs_total``,
``replay_pool_refused_total``, ``replay_pool_worker_rss_mib{release,machine}``,
``replay_pool_worker_start_seconds{release,machine}``
    the warm replay pool (:mod:`service.replay.pool`): live workers, candidates waiting,
    command lines served and refused (over the bound), and per worker its memory and how
    long its start (importing torch and SGLang) took.
``engine_cache_{hits,misses}_total{cache}``, ``engine_cache_entries{cache}``
    the engine's memo tables (``service.engine.cache_stats()``): hits and misses since
    start, and entries held.
``build_info{version}``, and the process collector's CPU, memory and file descriptors.

The registry is this module's own (:data:`REGISTRY`), not the library's global one. Each
process has its own numbers: with ``--workers N`` every worker answers ``/metrics`` with its
own, and a scrape reaches whichever worker accepts the connection (see docs/http-api.md).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import Mount

__all__ = [
    "CONTENT_TYPE_LATEST",
    "REGISTRY",
    "CacheCollector",
    "observe_request",
    "observe_triage",
    "render",
    "route_label",
    "set_version",
    "watch_engine_caches",
    "watch_replay_pool",
    "watch_replay_queue",
]

log = logging.getLogger("sglang_triage.metrics")

disable_created_metrics()  # no *_created series: they double the output and say little here
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_STAGE_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
_REPLAY_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 180.0, 300.0)

REQUESTS = Counter(
    "sglang_triage_http_requests",
    "HTTP requests, by route template and status.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "sglang_triage_http_request_duration_seconds",
    "HTTP request latency (first byte in to last byte out), by route and status.",
    ["method", "route", "status"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
STAGES = Histogram(
    "sglang_triage_triage_stage_seconds",
    "Time of each stage of a triage (the answer's timings_ms).",
    ["stage"],
    buckets=_STAGE_BUCKETS,
    registry=REGISTRY,
)
TRIAGES = Counter(
    "sglang_triage_triages",
    "Triages answered, by the answer's status.",
    ["status"],
    registry=REGISTRY,
)
REPLAY_JOBS = Counter(
    "sglang_triage_replay_jobs",
    "Background replay batches that ended.",
    ["outcome"],
    registry=REGISTRY,
)
REPLAY_SECONDS = Histogram(
    "sglang_triage_replay_job_seconds",
    "Run time of a background replay batch (not its wait in the queue).",
    buckets=_REPLAY_BUCKETS,
    registry=REGISTRY,
)
REPLAY_DEPTH = Gauge(
    "sglang_triage_replay_queue_depth",
    "Replay batches waiting in the queue (not counting the one running).",
    registry=REGISTRY,
)
BUILD = Info("sglang_triage_build", "The running sglang-triage.", registry=REGISTRY)

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_STAGE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_MAX_STAGES = 32


def route_label(scope: Mapping[str, Any]) -> str:
    """The route template that served ``scope``: ``/triage/{tid}`` (the router leaves the
    route in the scope), ``<mount>/*`` for a mounted app such as the static files (seen as the
    ``root_path`` the mount added), ``<unmatched>`` when nothing matched (a 404)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and path:
        return path.rstrip("/") + "/*" if isinstance(route, Mount) else path
    root, app_root = str(scope.get("root_path") or ""), str(scope.get("app_root_path") or "")
    if (
        scope.get("endpoint") is not None
        and len(root) > len(app_root)
        and root.startswith(app_root)
    ):
        return root[len(app_root) :].rstrip("/") + "/*"
    return "<unmatched>"


def observe_request(scope: Mapping[str, Any], status: int, seconds: float) -> None:
    """Count one HTTP request and observe its latency."""
    method = str(scope.get("method") or "")
    method = method if method in _METHODS else "OTHER"
    labels = (method, route_label(scope), str(status))
    REQUESTS.labels(*labels).inc()
    LATENCY.labels(*labels).observe(seconds)


def observe_triage(timings_ms: Mapping[str, Any], status: str | None) -> None:
    """Observe one triage answer's per-stage timings (ms) and count it by status."""
    for stage, ms in list(timings_ms.items())[:_MAX_STAGES]:
        if isinstance(stage, str) and _STAGE.fullmatch(stage) and isinstance(ms, int | float):
            STAGES.labels(stage).observe(max(float(ms), 0.0) / 1000.0)
    TRIAGES.labels(status if status and _STAGE.fullmatch(status) else "other").inc()


class CacheCollector(Collector):
    """Hits, misses and entries of the engine's memo tables, read at scrape time from
    ``stats()`` (``{name: {"size", "max", "hits", "misses"}}``)."""

    def __init__(self, stats: Callable[[], Mapping[str, Mapping[str, int]]]) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Any]:
        hits = CounterMetricFamily(
            "sglang_triage_engine_cache_hits",
            "Lookups answered from an engine cache.",
            labels=["cache"],
        )
        misses = CounterMetricFamily(
            "sglang_triage_engine_cache_misses",
            "Lookups an engine cache could not answer.",
            labels=["cache"],
        )
        entries = GaugeMetricFamily(
            "sglang_triage_engine_cache_entries",
            "Entries held by an engine cache.",
            labels=["cache"],
        )
        try:
            table = self.stats()
        except Exception as exc:
            log.warning("engine cache stats unavailable: %s", exc)
            table = {}
        for name, row in sorted(table.items()):
            hits.add_metric([name], row.get("hits", 0))
            misses.add_metric([name], row.get("misses", 0))
            entries.add_metric([name], row.get("size", 0))
        return [hits, misses, entries]


class PoolCollector(Collector):
    """The warm replay pool's :meth:`~service.replay.pool.WarmPool.stats`, read at scrape
    time."""

    def __init__(self, stats: Callable[[], Mapping[str, Any]]) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Any]:
        try:
            st = self.stats()
        except Exception as exc:
            log.warning("replay pool stats unavailable: %s", exc)
            st = {}
        workers = list(st.get("workers") or [])
        out: list[Any] = [
            GaugeMetricFamily(
                "sglang_triage_replay_pool_workers",
                "Warm replay workers running.",
                value=sum(1 for w in workers if w.get("alive")),
            ),
            GaugeMetricFamily(
                "sglang_triage_replay_pool_waiting",
                "Candidate command lines waiting for a warm worker.",
                value=st.get("queue_depth", 0),
            ),
            CounterMetricFamily(
                "sglang_triage_replay_pool_jobs",
                "Command lines a warm worker validated.",
                value=st.get("jobs_served", 0),
            ),
            CounterMetricFamily(
                "sglang_triage_replay_pool_refused",
                "Candidate command lines refused (the pool was full).",
                value=st.get("refused", 0),
            ),
        ]
        rss = GaugeMetricFamily(
            "sglang_triage_replay_pool_worker_rss_mib",
            "Resident memory of a warm replay worker.",
            labels=["release", "machine"],
        )
        start = GaugeMetricFamily(
            "sglang_triage_replay_pool_worker_start_seconds",
            "How long the worker's start (imports, warm-up) took.",
            labels=["release", "machine"],
        )
        for w in workers:
            labels = [str(w.get("release")), str(w.get("machine"))]
            rss.add_metric(labels, float(w.get("rss_mib") or 0.0))
            start.add_metric(labels, float(w.get("start_s") or 0.0))
        return [*out, rss, start]


def watch_replay_pool(stats: Callable[[], Mapping[str, Any]]) -> None:
    """Report the warm replay pool's workers, queue and memory at scrape time."""
    if _once("pool"):
        REGISTRY.register(PoolCollector(stats))


_wired = threading.Lock()
_done: set[str] = set()


def _once(what: str) -> bool:
    """True the first time ``what`` is asked for in this process (metrics are per process;
    ``create_app`` may run many times)."""
    with _wired:
        if what in _done:
            return False
        _done.add(what)
        return True


def watch_replay_queue(queue: Any) -> None:
    """Report ``queue``'s depth at scrape time and each batch's run time when it ends."""
    if not _once("replay"):
        return
    REPLAY_DEPTH.set_function(queue.depth)

    def ended(seconds: float, ok: bool) -> None:
        REPLAY_JOBS.labels("ok" if ok else "error").inc()
        REPLAY_SECONDS.observe(seconds)

    queue.add_listener(ended)


def watch_engine_caches(stats: Callable[[], Mapping[str, Mapping[str, int]]] | None) -> None:
    """Report the engine's cache statistics when the engine offers them."""
    if stats is not None and _once("caches"):
        REGISTRY.register(CacheCollector(stats))


def set_version(version: str) -> None:
    """Publish ``sglang_triage_build_info{version=...}``."""
    BUILD.info({"version": version})


def render() -> bytes:
    """The registry in Prometheus' text format."""
    return generate_latest(REGISTRY)
