"""What the bot sends to Slack: posts, updates and slash-command responses, rate-limited per
channel and redacted of secrets; the Web API client itself (:func:`make_client`)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import httpx
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from service.engine import redact_payload
from service.settings import Settings, reveal
from service.slack.state import TokenBucket

__all__ = ["Blocks", "Replies", "allowed_response_url", "make_client"]

log = logging.getLogger("sglang_triage.slack")

Blocks = list[dict[str, Any]]


class Replies:
    """Posts through ``client``: one token of ``bucket`` per message to a channel, every
    payload redacted of ``secrets`` (the bot's tokens and the service's keys)."""

    def __init__(
        self,
        client: WebClient,
        bucket: TokenBucket,
        secrets: tuple[str, ...],
        settings: Settings,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.secrets = secrets
        self.settings = settings

    def post(self, channel: str, thread_ts: str | None, text: str, blocks: Blocks) -> str | None:
        """``chat.postMessage``; the message's ts, or None when dropped or refused."""
        if not self.bucket.acquire(channel):
            log.warning("rate limit: dropping a reply to %s", channel)
            return None
        payload = redact_payload({"text": text[:3000], "blocks": blocks}, self.secrets)
        try:
            resp = self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, unfurl_links=False, **payload
            )
        except SlackApiError as exc:
            log.warning("chat.postMessage to %s failed: %s", channel, exc.response.get("error"))
            return None
        return resp.get("ts")

    def update(self, channel: str, ts: str, text: str, blocks: Blocks) -> None:
        """``chat.update`` of message ``ts``."""
        if not self.bucket.acquire(channel):
            return
        payload = redact_payload({"text": text[:3000], "blocks": blocks}, self.secrets)
        try:
            self.client.chat_update(channel=channel, ts=ts, **payload)
        except SlackApiError as exc:
            log.warning("chat.update failed: %s", exc.response.get("error"))

    def respond(self, response_url: str | None, text: str, blocks: Blocks) -> None:
        """Post to a slash command's ``response_url`` (only to an allowed host)."""
        if not response_url:
            return
        if not allowed_response_url(response_url, self.settings.slack_response_hosts):
            log.warning("refusing to post to a response_url outside TRIAGE_SLACK_RESPONSE_HOSTS")
            return
        payload = redact_payload(
            {"text": text[:3000], "blocks": blocks, "response_type": "in_channel"}, self.secrets
        )
        try:
            httpx.post(response_url, json=payload, timeout=10.0)
        except httpx.HTTPError as exc:
            log.warning("response_url post failed: %s", exc)


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def allowed_response_url(url: str, hosts: list[str]) -> bool:
    """May the bot post to ``url`` (a slash command's ``response_url``)? Only to a host in
    ``hosts`` (``TRIAGE_SLACK_RESPONSE_HOSTS``: Slack's), over https; a loopback host listed
    there (a test's stub) may use http. Never to a URL with credentials or another port
    trick: the host is compared after parsing."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return False
    if parts.username or parts.password or host not in {h.lower() for h in hosts}:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK)


def make_client(settings: Settings) -> WebClient:
    """A WebClient with the bot token, ``settings.slack_api_url`` and 429 retries."""
    kwargs: dict[str, Any] = {"token": reveal(settings.slack_bot_token), "timeout": 20}
    if settings.slack_api_url:
        kwargs["base_url"] = settings.slack_api_url.rstrip("/") + "/"
    client = WebClient(**kwargs)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=2))
    return client
