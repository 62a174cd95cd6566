"""A real uvicorn server on loopback, serving the app against the suite's KB."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from service.api.app import app_settings, create_app
from service.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn in a thread; stops when the fixture ends."""

    def __init__(self, app, port: int) -> None:
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def make_server(settings: Settings) -> ServerThread:
    app = create_app(settings)
    app.dependency_overrides[app_settings] = lambda: settings
    return ServerThread(app, free_port())


@pytest.fixture(scope="session")
def api_settings(kb_settings: Settings, kb, tmp_path_factory) -> Settings:
    """The suite's KB; background replay off (one test turns it on and waits for it), and
    no on-demand ingest: a test naming a release the KB lacks must not add it to the shared
    KB (tests/service/api/test_ondemand.py ingests on demand into a KB of its own). No
    per-client rate limit either: every test posts from 127.0.0.1 to this one server
    (tests/service/hardening/test_limits.py turns it on for a server of its own)."""
    return kb_settings.model_copy(
        update={"replay_enabled": False, "on_demand_ingest": False, "triage_rate_per_minute": 0.0}
    )


@pytest.fixture(scope="session")
def server(api_settings: Settings) -> Iterator[ServerThread]:
    with make_server(api_settings) as srv:
        yield srv


@pytest.fixture()
def client(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
