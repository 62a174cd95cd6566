"""The HTTP API (FastAPI): ``POST /triage`` and friends.

Settings come from :func:`~service.settings.get_settings` through
``Depends(app_settings)``; the KB and engine are built once per KB folder
(:mod:`service.api.deps`). Tests swap them with ``app.dependency_overrides``. Every error
is JSON with a ``detail`` and, for inputs we could not use, what *was* understood; no input
produces a 500.

Endpoints (:mod:`service.api.routes`): ``POST /triage`` (text/plain log or JSON ``{log,
command?, release?, hardware?, model?, python?}``), ``GET /triage/{id}``,
``POST /incidents/{id}/confirm``, ``GET /incidents``, ``GET /search``, ``GET /releases``,
``POST /lint``, ``GET /rules``, ``GET /healthz``, ``GET /readyz``, ``GET /version``,
``GET /metrics`` (:mod:`service.api.ops`); the web page (:mod:`service.web`) at ``/``.
Bearer API keys (``TRIAGE_API_KEYS``) guard everything but the health checks, the version
and the static page. Every request gets an id and one JSON access line
(:mod:`service.api.logs`) and is counted in the metrics (:mod:`service.api.metrics`).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from kb.errors import ConfigError, ReleaseNotIngested, TriageError, VectorStoreError
from service.api import responses
from service.api.deps import (
    MAX_KEY_FAILURES,
    app_settings,
    get_engine,
    get_kb,
    get_records,
    key_ok,
    require_key,
)
from service.api.docs import mount_docs
from service.api.guard import RequestGuard, allowed_hosts
from service.api.middleware import RequestIdMiddleware
from service.api.ops import app_version, mount_ops
from service.api.routes import health, incidents, knowledge, triage
from service.errors import BinaryInput, EmptyInput, InputTooLarge, LogParseError, UnknownRelease
from service.settings import Settings, get_settings, reveal

__all__ = [
    "MAX_KEY_FAILURES",
    "RequestIdMiddleware",
    "app",
    "app_settings",
    "create_app",
    "get_engine",
    "get_kb",
    "get_records",
    "key_ok",
    "require_key",
]

_STATUS: list[tuple[type[TriageError], int]] = [
    (EmptyInput, 400),
    (BinaryInput, 415),
    (InputTooLarge, 413),
    (LogParseError, 422),
    (ReleaseNotIngested, 404),
    (UnknownRelease, 422),
    (ConfigError, 400),
    (VectorStoreError, 503),
]


async def triage_error(_: Request, exc: TriageError) -> JSONResponse:
    """Any :class:`TriageError` as JSON: its message, its class and its details, with the
    status of :data:`_STATUS` (422 for the rest)."""
    status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 422)
    return JSONResponse(
        {"detail": exc.message, "error": type(exc).__name__, **exc.details}, status_code=status
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API. ``settings`` (default: the process's) configure what is fixed when the app is
    built: the request guard, Slack; requests read theirs through :func:`app_settings`."""
    app = FastAPI(
        title="sglang-triage",
        version=app_version(),
        description="Why did SGLang refuse to start, and which flag change fixes it?",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )  # see service.api.docs

    settings = settings or get_settings()
    app.add_middleware(
        RequestGuard,
        hosts=allowed_hosts(settings.allowed_hosts, settings.public_url),
        origins=frozenset({settings.public_url.rstrip("/").lower()}),
        max_body_bytes=settings.max_body_bytes,
    )
    app.add_middleware(RequestIdMiddleware)  # outermost: every answer gets its request id
    app.add_exception_handler(TriageError, triage_error)  # type: ignore[arg-type]
    for routes in (health, knowledge, triage, incidents):
        app.include_router(routes.router)

    from service.web import mount_web

    mount_web(app, require_key, get_kb)  # the page at / and /t/{id}, /static, /hardware, /source
    mount_docs(app, require_key)  # /openapi.json and /docs, local assets, behind the keys
    mount_ops(app, require_key)  # /metrics behind the keys, /version open
    responses.install(app)  # short 422s; the error answers in /openapi.json
    if reveal(settings.slack_bot_token) and reveal(settings.slack_signing_secret):
        from service.slack.serve import mount_slack

        mount_slack(app, settings)
    return app


app = create_app()
