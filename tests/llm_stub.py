"""A scripted OpenAI-compatible chat server on loopback, for the LLM-layer tests.

``ScriptedLLM`` serves ``POST /v1/chat/completions`` (what LangChain's
``ChatOpenAI`` calls for every structured-output method) with uvicorn in a
thread on ``127.0.0.1`` and a free port. Each request pops the next scripted
reply from a queue and is recorded (``.requests`` holds the JSON bodies).

A reply is a dict with any of:

* ``content``: the assistant message text (a dict is sent as JSON text);
* ``tool_args``: arguments of a tool call to the first tool offered;
* ``sleep``: seconds to wait before answering (a hang);
* ``hold``: a ``threading.Event`` to wait for before answering (a hang the test ends);
* ``status``: an HTTP error status to return instead.

With ``answer`` (a function of the request body returning the message text), every request
is answered by it instead of the queue: :mod:`tests.local_llm` serves a real local model so.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


class ScriptedLLM:
    """The server; use as a context manager, ``push()`` replies, read ``requests``."""

    def __init__(self, answer: Callable[[dict[str, Any]], str] | None = None) -> None:
        self.answer = answer
        self.replies: deque[dict[str, Any]] = deque()
        self.requests: list[dict[str, Any]] = []
        #: indexes (into ``requests``) of the requests answered so far; a held or sleeping
        #: request is not among them
        self.answered: list[int] = []
        self._closing = threading.Event()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self._chat)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", timeout_graceful_shutdown=1, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, **reply: Any) -> None:
        self.replies.append(reply)

    def start(self) -> ScriptedLLM:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("scripted LLM server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._closing.set()
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._sock.close()

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        index = len(self.requests)
        self.requests.append(body)
        if self.answer is not None:
            reply: dict[str, Any] = {"content": await asyncio.to_thread(self.answer, body)}
        else:
            reply = self.replies.popleft() if self.replies else {"status": 500}
        if reply.get("sleep"):  # a hang, cut short when the server stops
            until = time.monotonic() + float(reply["sleep"])
            while time.monotonic() < until and not self._closing.is_set():
                await asyncio.sleep(0.05)
        hold = reply.get("hold")
        while hold is not None and not hold.is_set() and not self._closing.is_set():
            await asyncio.sleep(0.05)
        self.answered.append(index)
        if reply.get("status"):
            return JSONResponse(
                {"error": {"message": "scripted failure", "type": "server_error"}},
                status_code=int(reply["status"]),
            )
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        if "tool_args" in reply:
            name = (body.get("tools") or [{}])[0].get("function", {}).get("name", "answer")
            message["tool_calls"] = [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(reply["tool_args"])},
                }
            ]
            finish = "tool_calls"
        else:
            content = reply.get("content", "")
            message["content"] = content if isinstance(content, str) else json.dumps(content)
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )
