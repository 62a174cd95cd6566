"""The web page against a real uvicorn server and Debian's headless Chromium.

The server is the real app on a free loopback port, reading the suite's
session KB (``kb`` / ``kb_settings`` in ``tests/conftest.py``), with replay off
and its own ``records.sqlite`` in a temporary folder, so confirmations made
here never reach the shared KB's records. The browser is ``/usr/bin/chromium``
(``scripts/install-browser.sh`` installs it; ``make test`` runs that script)
driven by the Python ``playwright`` package; ``playwright install`` is never
used. Without either, the browser tests fail (skip them with TRIAGE_SKIP_BROWSER=1).

Screenshots go to ``$TRIAGE_ARTIFACTS/screenshots`` (default
``artifacts/screenshots`` in the repo, which is gitignored).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb.records import Records
from service.api.app import app_settings, create_app, get_records
from service.settings import Settings

from ..api.conftest import ServerThread, free_port

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = os.environ.get("TRIAGE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SEED_LOG = (REPO / "examples" / "seed_attempt1.log").read_text()


class WebServer(ServerThread):
    """A :class:`ServerThread` that also exposes its settings and records store."""

    settings: Settings
    records: Records


def make_web_server(settings: Settings, records_dir: Path) -> WebServer:
    """The real app over loopback with ``settings`` and records kept in ``records_dir``."""
    records = Records(records_dir / "records.sqlite")
    app = create_app()
    app.dependency_overrides[app_settings] = lambda: settings
    app.dependency_overrides[get_records] = lambda: records
    srv = WebServer(app, free_port())
    srv.settings = settings
    srv.records = records
    return srv


@pytest.fixture(scope="session")
def web_settings(kb_settings: Settings, kb: Any) -> Settings:  # kb: the KB is ingested first
    """The suite's KB, background replay off (one test fakes a pending replay instead)."""
    return kb_settings.model_copy(update={"replay_enabled": False, "api_keys": []})


@pytest.fixture(scope="session")
def web_server(
    web_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    with make_web_server(web_settings, tmp_path_factory.mktemp("web-records")) as srv:
        yield srv


@pytest.fixture(scope="session")
def keyed_server(
    web_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    """The same app with ``TRIAGE_API_KEYS=["s3cret"]``."""
    settings = web_settings.model_copy(update={"api_keys": ["s3cret"]})
    with make_web_server(settings, tmp_path_factory.mktemp("web-records-keyed")) as srv:
        yield srv


@pytest.fixture(scope="session")
def shots() -> Path:
    """The folder for screenshots (kept after the run as test artifacts)."""
    base = Path(os.environ.get("TRIAGE_ARTIFACTS", REPO / "artifacts"))
    out = base / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    return out


class PageErrors(list):
    """JavaScript errors seen on a page (``pageerror`` and ``console.error``)."""


@pytest.fixture()
def new_page(browser: Any, web_server: WebServer) -> Iterator[Any]:
    """``new_page(width=1280, height=900, server=web_server)`` -> a page in a fresh context.

    The context may read and write the clipboard. After the test, no page may
    have raised a JavaScript error (failed fetches that the page shows as
    errors are logged by Chromium as console errors and are allowed: they
    start with "Failed to load resource").
    """
    contexts: list[Any] = []
    errors = PageErrors()

    def make(
        width: int = 1280,
        height: int = 900,
        server: WebServer | None = None,
        init_script: str | None = None,
    ) -> Any:
        srv = server or web_server
        ctx = browser.new_context(viewport={"width": width, "height": height}, base_url=srv.url)
        ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=srv.url)
        if init_script:
            ctx.add_init_script(init_script)
        ctx.set_default_timeout(120_000)
        contexts.append(ctx)
        page = ctx.new_page()
        watch(page)
        return page

    def watch(page: Any) -> None:
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: (
                errors.append(f"console: {msg.text}")
                if msg.type == "error" and "Failed to load resource" not in msg.text
                else None
            ),
        )

    make.watch = watch  # type: ignore[attr-defined]
    yield make
    for ctx in contexts:
        ctx.close()
    assert list(errors) == []
