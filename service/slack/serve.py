"""Serving the bot: HTTP events on the API app (:func:`mount_slack`) or Socket Mode
(:func:`run_socket_mode`), with the API's engine and records by default
(:func:`default_parts`)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from slack_bolt.adapter.fastapi import SlackRequestHandler
from slack_bolt.adapter.starlette.handler import to_bolt_request, to_starlette_response

from kb.errors import ConfigError
from kb.records import Records
from service.settings import Settings, reveal
from service.slack.bot import EngineFactory, SlackTriageBot

__all__ = ["default_parts", "mount_slack", "run_socket_mode"]


def default_parts(
    settings: Settings, engine_factory: EngineFactory | None, records: Records | None
) -> tuple[EngineFactory, Records]:
    """``engine_factory`` and ``records``, or the API's (:mod:`service.wiring`) when None."""
    from service.wiring import engine_for, records_for

    factory = engine_factory or (lambda: engine_for(settings))
    return factory, records or records_for(settings)


class _ThreadedHandler(SlackRequestHandler):
    """Bolt's FastAPI handler, dispatching on a worker thread so the event loop never waits."""

    async def handle(
        self, req: Any, addition_context_properties: dict[str, Any] | None = None
    ) -> Any:
        from starlette.concurrency import run_in_threadpool

        if req.method != "POST":
            return await super().handle(req, addition_context_properties)
        body = await req.body()
        try:  # Bolt parses the body before it checks the signature
            bolt_req = to_bolt_request(req, body, addition_context_properties)
        except ValueError:  # a body starting with "{" that is not JSON, bad form encoding
            return Response(
                "the request body is neither JSON nor form data",
                status_code=400,
                media_type="text/plain",
            )
        bolt_resp = await run_in_threadpool(self.app.dispatch, bolt_req)
        return to_starlette_response(bolt_resp)


def mount_slack(
    app: FastAPI,
    settings: Settings,
    engine_factory: EngineFactory | None = None,
    records: Records | None = None,
    *,
    path: str = "/slack/events",
) -> SlackTriageBot:
    """Add ``POST {path}`` (events, slash command, interactivity) to a FastAPI app.

    Slack signs every request; Bolt answers 401 to a bad signature or a
    timestamp over five minutes old, and this route answers 401 to a timestamp
    that is not a number and to a form post (slash command, button) whose
    signature it has already seen (a replay; Slack never resends those). The
    body limit is the API's (:mod:`service.api.guard`). The engine defaults to
    the API's KB and the records to the API's ``records.sqlite``, so report
    links resolve.
    """
    factory, recs = default_parts(settings, engine_factory, records)
    bot = SlackTriageBot(settings, factory, recs)
    handler = _ThreadedHandler(bot.app)
    signatures = bot.state.signatures  # kept 6 min: Bolt refuses older timestamps

    @app.post(path, include_in_schema=False)
    async def slack_events(request: Request) -> Response:
        if not request.headers.get("x-slack-request-timestamp", "").isdigit():
            return Response("missing or malformed Slack request timestamp", status_code=401)
        try:
            text = (await request.body()).decode("utf-8")
        except UnicodeDecodeError:
            return Response("the body is not UTF-8", status_code=400)
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "application/json":
            try:
                envelope = json.loads(text)
            except ValueError:
                envelope = None
            if not isinstance(envelope, dict):
                return Response("the body is not a JSON object", status_code=400)
        elif ctype != "application/x-www-form-urlencoded":
            return Response("Slack sends JSON or form-encoded bodies", status_code=415)
        # a forged signature recorded here is harmless: it never equals a real one
        if ctype == "application/x-www-form-urlencoded" and not signatures.add(
            request.headers.get("x-slack-signature", "")
        ):
            return Response("replayed Slack request", status_code=401)
        return await handler.handle(request)

    app.state.slack_bot = bot
    return bot


def run_socket_mode(
    settings: Settings, engine_factory: EngineFactory | None = None, records: Records | None = None
) -> None:
    """Serve the bot over Socket Mode (``xapp-`` token; no public URL needed). Blocks."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    if not settings.slack_app_token:
        raise ConfigError("Socket Mode needs TRIAGE_SLACK_APP_TOKEN (an xapp- app-level token)")
    factory, recs = default_parts(settings, engine_factory, records)
    bot = SlackTriageBot(settings, factory, recs, socket_mode=True)
    SocketModeHandler(bot.app, reveal(settings.slack_app_token), web_client=bot.client).start()
