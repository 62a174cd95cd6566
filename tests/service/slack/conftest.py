"""The real app (uvicorn on loopback) with the Slack bot mounted, talking to a Slack API stub."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from evals.render import render_log
from service.api.app import app_settings, create_app
from service.engine.triage import Engine
from service.settings import Settings
from service.slack.bot import SlackTriageBot
from service.slack.serve import mount_slack
from tests.service.api.conftest import ServerThread, free_port

from .stub import SlackStub, running_stub

BOT_TOKEN = "xoxb-1111111111-2222222222-stubBotTokenValue"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
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


def sign(body: bytes, timestamp: int, secret: str = SIGNING_SECRET) -> str:
    """Slack's v0 request signature."""
    base = f"v0:{timestamp}:".encode() + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackClient:
    """Sends signed Slack requests (events, slash commands, interactivity) to the app."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def post(
        self,
        body: bytes,
        content_type: str,
        *,
        timestamp: int | None = None,
        secret: str = SIGNING_SECRET,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        ts = int(time.time()) if timestamp is None else timestamp
        hdrs = {
            "content-type": content_type,
            "x-slack-request-timestamp": str(ts),
            "x-slack-signature": sign(body, ts, secret),
            **(headers or {}),
        }
        return self.http.post("/slack/events", content=body, headers=hdrs)

    def event(self, event: dict[str, Any], event_id: str, **kw: Any) -> httpx.Response:
        envelope = {
            "token": "legacy",
            "team_id": "T0STUB",
            "api_app_id": "A0STUB",
            "type": "event_callback",
            "event": event,
            "event_id": event_id,
            "event_time": int(time.time()),
        }
        return self.post(json.dumps(envelope).encode(), "application/json", **kw)

    def command(self, text: str, channel: str, response_url: str, **kw: Any) -> httpx.Response:
        form = {
            "token": "legacy",
            "team_id": "T0STUB",
            "channel_id": channel,
            "user_id": "U0USER",
            "command": "/sglang-triage",
            "text": text,
            "response_url": response_url,
            "trigger_id": "1.2.3",
            "api_app_id": "A0STUB",
        }
        return self.post(urlencode(form).encode(), "application/x-www-form-urlencoded", **kw)

    def action(self, payload: dict[str, Any], **kw: Any) -> httpx.Response:
        return self.post(
            urlencode({"payload": json.dumps(payload)}).encode(),
            "application/x-www-form-urlencoded",
            **kw,
        )


@pytest.fixture(scope="session")
def seed_log(kb) -> str:
    check = next(
        c
        for c in kb.store.checks("0.5.11", function="ServerArgs._handle_speculative_decoding")
        if c.bare and "speculative_eagle_topk is None" in c.condition
    )
    return render_log(kb.store, "0.5.11", check, python="3.12", argv=SEED_ARGV)


@pytest.fixture(scope="session")
def seed_fix(kb, seed_log: str) -> str:
    """The engine's recommended fix command for the seed crash."""
    result = Engine(kb).triage(seed_log)
    return next(f.command for f in result.fixes if f.recommended)


@pytest.fixture(scope="session")
def slack_stub() -> Iterator[SlackStub]:
    with running_stub(BOT_TOKEN) as stub:
        yield stub


@pytest.fixture(scope="session")
def slack_settings(kb_settings: Settings, kb, slack_stub: SlackStub) -> Settings:
    port = free_port()
    return kb_settings.model_copy(
        update={
            "slack_bot_token": BOT_TOKEN,
            "slack_signing_secret": SIGNING_SECRET,
            "slack_api_url": f"{slack_stub.url}/api/",
            "public_url": f"http://127.0.0.1:{port}",
            "api_keys": [],
            "slack_response_hosts": ["127.0.0.1"],
        }
    )


@pytest.fixture(scope="session")
def slack_server(slack_settings: Settings, kb) -> Iterator[ServerThread]:
    app = create_app()
    app.dependency_overrides[app_settings] = lambda: slack_settings
    bot = mount_slack(app, slack_settings, engine_factory=lambda: Engine(kb))
    port = int(slack_settings.public_url.rsplit(":", 1)[1])
    with ServerThread(app, port) as srv:
        srv.bot = bot  # type: ignore[attr-defined]
        yield srv
    bot.close()


@pytest.fixture(scope="session")
def slack_bot(slack_server: ServerThread) -> SlackTriageBot:
    return slack_server.bot  # type: ignore[attr-defined]


@pytest.fixture()
def slack(slack_server: ServerThread) -> Iterator[SlackClient]:
    with httpx.Client(base_url=slack_server.url, timeout=30) as http:
        yield SlackClient(http)
