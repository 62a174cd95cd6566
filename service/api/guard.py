"""The gate every HTTP request passes before the app sees it.

:class:`RequestGuard` (a plain ASGI middleware) refuses, in this order:

* a ``Host`` header outside the allow-list (DNS rebinding): 400. The default
  list is the loopback names plus the host of ``TRIAGE_PUBLIC_URL``;
  ``TRIAGE_ALLOWED_HOSTS`` replaces it;
* a state-changing request (POST, PUT, PATCH, DELETE) sent by a browser from
  another site: ``Sec-Fetch-Site`` other than ``same-origin``/``none``, or an
  ``Origin`` that is not this service's: 403. Clients that are not browsers
  (curl, the CLI, Slack) send neither header and pass;
* a body whose next part takes over :data:`BODY_TIMEOUT_S` to arrive (a slow
  client holding a worker): 408;
* a body over the limit (``TRIAGE_MAX_BODY_BYTES`` plus a small envelope),
  whether announced by ``Content-Length`` or streamed in chunks: 413, after
  reading at most the limit (memory stays bounded);
* a JSON body that does not decode, nests deeper than :data:`MAX_JSON_DEPTH`
  or holds text that cannot be encoded (a lone surrogate such as ``\\ud800``):
  422. A body that passes is handed on decoded too (``request.state.json_body``).

Everything it answers is JSON ``{"detail", "error"}`` like the app's errors.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from kb.records import MAX_DEPTH, json_problem

__all__ = ["BODY_TIMEOUT_S", "ENVELOPE_BYTES", "MAX_JSON_DEPTH", "RequestGuard", "allowed_hosts"]

#: Room for a JSON envelope around a log of the maximum size.
ENVELOPE_BYTES = 64 * 1024
MAX_JSON_DEPTH = MAX_DEPTH
#: Seconds a client may take to send the next part of a body.
BODY_TIMEOUT_S = 30.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def allowed_hosts(configured: Iterable[str], public_url: str) -> frozenset[str]:
    """Host names (without port) requests may name: ``configured``, else the loopback names
    and the public URL's host."""
    hosts = [h.strip().lower() for h in configured if h.strip()]
    if not hosts:
        hosts = [*LOOPBACK, (urlsplit(public_url).hostname or "").lower()]
    return frozenset(h.strip("[]") for h in hosts if h)


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _json_problem(body: bytes) -> tuple[Any, str | None]:
    """(the decoded body, why it is not acceptable JSON, or None when it is)."""
    try:
        value = json.loads(body)
    except RecursionError:
        return None, f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels"
    except ValueError as exc:
        return None, f"invalid JSON body: {str(exc)[:200]}"
    problem = json_problem(value)
    return (None, f"invalid JSON body: {problem}") if problem else (value, None)


class RequestGuard:
    """See the module docstring: ``hosts`` allowed in ``Host``, ``origins`` allowed besides
    the request's own, and the body limit."""

    def __init__(
        self, app: Any, *, hosts: frozenset[str], origins: frozenset[str], max_body_bytes: int
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.origins = origins
        self.limit = max_body_bytes + ENVELOPE_BYTES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers") or ()}
        raw_host = headers.get(b"host", b"").decode("latin-1").strip().lower()
        host = _host_name(raw_host)
        if host not in self.hosts:
            await _reject(
                send,
                400,
                "HostNotAllowed",
                f"Host {host!r} is not served here (TRIAGE_ALLOWED_HOSTS)",
            )
            return
        if scope["method"] in _UNSAFE:
            problem = self._cross_site(headers, raw_host)
            if problem:
                await _reject(send, 403, "CrossSiteRequest", problem)
                return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _reject(
                send,
                413,
                "InputTooLarge",
                f"the body is over the {self.limit} byte limit",
                limit=self.limit,
            )
            return
        body = bytearray()
        more = scope["method"] not in ("GET", "HEAD", "OPTIONS")
        while more:
            try:
                message = await asyncio.wait_for(receive(), timeout=BODY_TIMEOUT_S)
            except asyncio.TimeoutError:
                await _reject(
                    send,
                    408,
                    "RequestTimeout",
                    f"the body did not arrive within {BODY_TIMEOUT_S:.0f} s",
                )
                return
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                await _reject(
                    send,
                    413,
                    "InputTooLarge",
                    f"the body is over the {self.limit} byte limit",
                    limit=self.limit,
                )
                return
            more = bool(message.get("more_body"))
        ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if body and ctype == b"application/json":
            value, problem = _json_problem(bytes(body))
            if problem:
                await _reject(send, 422, "InvalidBody", problem)
                return
            # routes that read the JSON themselves take it from here instead of decoding again
            scope.setdefault("state", {})["json_body"] = value
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _cross_site(self, headers: dict[bytes, bytes], host: str) -> str | None:
        site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
        if site and site not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site: {site})"
        origin = headers.get(b"origin", b"").decode("latin-1").strip().lower()
        if origin == "null":
            return "request from an opaque origin refused (Origin: null)"
        if origin and urlsplit(origin).netloc != host and origin.rstrip("/") not in self.origins:
            return f"request from another origin refused (Origin: {origin})"
        return None


async def _reject(send: Send, status: int, error: str, detail: str, **extra: Any) -> None:
    body = json.dumps({"detail": detail, "error": error, **extra}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
