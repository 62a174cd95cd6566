"""Operations routes: ``GET /metrics`` (Prometheus) and ``GET /version``.

``/metrics`` is behind the API keys like every route that says something about the
service's use (a Prometheus scrape job sends the key with ``authorization: {credentials:
...}``); on an open service it is open. ``/version`` is open, like ``/healthz``: the version
is in the OpenAPI document too, and a load balancer or a person checking a deploy should not
need a key for it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import Response

from service.api import metrics

__all__ = ["DISTRIBUTION", "app_version", "mount_ops"]

#: The distribution name in ``pyproject.toml``.
DISTRIBUTION = "sglang-triage"


def app_version() -> str:
    """The installed version of the package (``0+unknown`` when run from an uninstalled tree)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def mount_ops(app: FastAPI, require_key: Callable[..., Any]) -> None:
    """Add ``/metrics`` (behind ``require_key``) and ``/version``; start watching the replay
    queue, the warm replay pool and the engine's cache statistics."""
    from service.engine import cache_stats
    from service.replay.harness import QUEUE
    from service.replay.pool import default_pool

    metrics.set_version(app.version)
    metrics.watch_replay_queue(QUEUE)
    metrics.watch_replay_pool(lambda: default_pool().stats())
    metrics.watch_engine_caches(cache_stats)

    @app.get(
        "/metrics",
        dependencies=[Depends(require_key)],
        response_class=Response,
        responses={
            200: {
                "content": {"text/plain": {"schema": {"type": "string"}}},
                "description": "This process's metrics, Prometheus text format",
            }
        },
    )
    def prometheus() -> Response:
        """Request counts and latencies by route template, triage stage timings, the replay
        queue; one process's numbers (each worker has its own)."""
        return Response(metrics.render(), media_type=metrics.CONTENT_TYPE_LATEST)

    @app.get("/version")
    def app_version_route() -> dict[str, str]:
        """The running sglang-triage's version (from the installed package's metadata)."""
        return {"name": DISTRIBUTION, "version": app.version}
