"""A local stand-in for the Slack Web API (and file host and response_url) on loopback.

It records the payload of every call (``chat.postMessage``, ``chat.update``,
``files.info``, ``auth.test``...), answers like Slack does, serves uploaded
files at ``/files/{id}`` only to the bot token, and accepts ``response_url``
posts at ``/response/{id}``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

BOT_USER = "UBOT"
BOT_ID = "BBOT"


class SlackStub:
    """The stub's state: recorded calls, files to serve, and a ts counter."""

    def __init__(self, bot_token: str) -> None:
        self.bot_token = bot_token
        self.calls: list[dict[str, Any]] = []
        self.downloads: list[dict[str, Any]] = []
        self.files: dict[str, str] = {}
        self.url = ""
        self._lock = threading.Lock()
        self._ts = itertools.count(1)
        self.app = self._build()

    # -- recording --------------------------------------------------------------------
    def _record(self, method: str, payload: dict[str, Any], auth: str) -> None:
        with self._lock:
            self.calls.append({"method": method, "payload": payload, "auth": auth})

    def calls_of(
        self, method: str, pred: Callable[[dict[str, Any]], bool] = lambda p: True
    ) -> list[dict]:
        with self._lock:
            return [
                c["payload"] for c in self.calls if c["method"] == method and pred(c["payload"])
            ]

    def wait_for(
        self,
        method: str,
        pred: Callable[[dict[str, Any]], bool] = lambda p: True,
        timeout: float = 60.0,
        count: int = 1,
    ) -> list[dict[str, Any]]:
        """Poll until ``count`` matching calls were recorded (bounded by ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.calls_of(method, pred)
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {method} call matched within {timeout}s; calls: "
                    f"{[c['method'] for c in self.calls]}"
                )
            time.sleep(0.05)

    # -- the app ----------------------------------------------------------------------
    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.api_route("/api/{method}", methods=["GET", "POST"])
        async def api(method: str, request: Request) -> JSONResponse:
            payload: dict[str, Any] = dict(request.query_params)
            body = await request.body()
            ctype = request.headers.get("content-type", "")
            if body and "json" in ctype:
                payload.update(json.loads(body))
            elif body:
                payload.update(dict(parse_qsl(body.decode())))
            auth = request.headers.get("authorization", "")
            if auth != f"Bearer {self.bot_token}":
                self._record(method, payload, auth)
                return JSONResponse({"ok": False, "error": "invalid_auth"})
            answer = self._answer(method, payload)
            self._record(method, payload, auth)
            return JSONResponse(answer)

        @app.get("/files/{fid}")
        def download(fid: str, request: Request) -> Response:
            auth = request.headers.get("authorization", "")
            with self._lock:
                self.downloads.append({"id": fid, "auth": auth})
            if auth != f"Bearer {self.bot_token}" or fid not in self.files:
                return Response("<html>login</html>", status_code=403, media_type="text/html")
            return PlainTextResponse(self.files[fid])

        @app.post("/response/{rid}")
        async def response_url(rid: str, request: Request) -> JSONResponse:
            self._record("response_url", {"id": rid, **json.loads(await request.body())}, "")
            return JSONResponse({"ok": True})

        return app

    def _answer(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://stub.slack.test/",
                "team": "Stub",
                "user": "triage",
                "team_id": "T0STUB",
                "user_id": BOT_USER,
                "bot_id": BOT_ID,
            }
        if method == "chat.postMessage":
            ts = f"1800000000.{next(self._ts):06d}"
            payload["_ts"] = ts  # recorded with the call: the ts Slack gave the message
            return {
                "ok": True,
                "channel": payload.get("channel"),
                "ts": ts,
                "message": {"ts": ts, "text": payload.get("text"), "bot_id": BOT_ID},
            }
        if method == "chat.update":
            return {"ok": True, "channel": payload.get("channel"), "ts": payload.get("ts")}
        if method == "files.info":
            fid = payload.get("file", "")
            return {
                "ok": True,
                "file": {
                    "id": fid,
                    "name": f"{fid}.log",
                    "mimetype": "text/plain",
                    "filetype": "text",
                    "size": len(self.files.get(fid, "")),
                    "url_private_download": f"{self.url}/files/{fid}",
                },
            }
        return {"ok": True}


@contextmanager
def running_stub(token: str) -> Iterator[SlackStub]:
    """A :class:`SlackStub` for ``token`` served on a free loopback port (``stub.url`` set)
    for the duration of the block."""
    from tests.service.api.conftest import ServerThread, free_port

    stub = SlackStub(token)
    with ServerThread(stub.app, free_port()) as srv:
        stub.url = srv.url
        yield stub
