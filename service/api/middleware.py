"""Request ids, the access log and the request metrics: :class:`RequestIdMiddleware`."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from service.api import metrics
from service.api.logs import REQUEST_ID, log_access

__all__ = ["RequestIdMiddleware"]


class RequestIdMiddleware:
    """Gives every HTTP response an ``x-request-id`` (the client's, if sane), makes it the
    request id of every log line written while the request is served
    (:data:`~service.api.logs.REQUEST_ID`), logs one access line (method, path, status,
    duration_ms, client) and counts the request in the metrics by its route template.

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` would add a task
    and a stream copy to every request.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _request_id(dict(scope.get("headers") or ()).get(b"x-request-id", b""))
        token = REQUEST_ID.set(rid.decode())
        t0 = time.perf_counter()
        status = 500

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - t0
            metrics.observe_request(scope, status, seconds)
            client = scope.get("client")
            log_access(
                request_id=rid.decode(),
                method=str(scope.get("method")),
                path=str(scope.get("path")),
                status=status,
                duration_ms=round(seconds * 1000, 2),
                client=str(client[0]) if client else None,
            )
            REQUEST_ID.reset(token)


_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")


def _request_id(given: bytes) -> bytes:
    """The client's request id when it is short and plain, else a fresh one."""
    return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:12].encode()
