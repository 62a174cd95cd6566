"""The page and its assets over plain HTTP (no browser): served, self-contained, no key needed."""

from __future__ import annotations

import re

import httpx
from fastapi.testclient import TestClient

from service.api.app import app_settings, create_app
from service.web.routes import STATIC_DIR

from .conftest import WebServer

EXTERNAL = re.compile(r"https?://", re.I)
ASSET_REF = re.compile(r'(?:src|href)="(/static/[^"]+)"|from\s+"\./([^"]+)"')


def _assets(client: httpx.Client) -> dict[str, str]:
    """Every asset the page loads, following the JavaScript module imports."""
    seen: dict[str, str] = {}
    paths = [a for groups in ASSET_REF.findall(client.get("/").text) for a in groups if a]
    while paths:
        path = paths.pop()
        url = path if path.startswith("/static/") else f"/static/{path}"
        if url in seen:
            continue
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code)
        seen[url] = r.text
        paths += [a for groups in ASSET_REF.findall(r.text) for a in groups if a]
    return seen


def test_page_and_assets_are_served_and_self_contained(web_server: WebServer) -> None:
    with httpx.Client(base_url=web_server.url, timeout=30) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        assert not EXTERNAL.search(page.text), EXTERNAL.findall(page.text)
        assets = _assets(client)
        assert {"/static/app.css", "/static/app.js", "/static/render.js", "/static/dom.js"} <= set(
            assets
        )
        for url, text in assets.items():
            assert not EXTERNAL.search(text), f"{url} names an external URL"
        # every file shipped in static/ is checked, referenced or not
        for f in STATIC_DIR.iterdir():
            assert not EXTERNAL.search(f.read_text()), f.name
        assert (
            client.get("/static/app.js")
            .headers["content-type"]
            .startswith(("text/javascript", "application/javascript"))
        )
        permalink = client.get("/t/0123456789abcdef")
        assert permalink.status_code == 200 and permalink.text == page.text
        assert client.get("/static/nope.js").status_code == 404


def test_hardware_and_source_lookups(web_server: WebServer) -> None:
    with httpx.Client(base_url=web_server.url, timeout=30) as client:
        hw = client.get("/hardware").json()
        assert "rtx-pro-6000-x8" in {p["name"] for p in hw["profiles"]}
        assert "DeepseekV3ForCausalLM" in hw["model_archs"]
        src = client.get(
            "/source",
            params={
                "release": "0.5.11",
                "path": "sglang/srt/server_args.py",
                "start": 3519,
                "end": 3522,
                "context": 2,
            },
        ).json()
        assert src["citation"] == "0.5.11:sglang/srt/server_args.py:3519-3522"
        assert [ln["line"] for ln in src["lines"]] == list(range(3517, 3525))
        marked = [ln for ln in src["lines"] if ln["highlight"]]
        assert [ln["line"] for ln in marked] == [3519, 3520, 3521, 3522]
        assert marked[0]["text"].strip() == "assert ("
        missing = client.get("/source", params={"release": "0.5.11", "path": "nope.py", "start": 1})
        assert missing.status_code == 404
        assert (
            client.get("/source", params={"release": "0.5.11", "path": "x", "start": 0}).status_code
            == 422
        )


def test_page_needs_no_key_but_the_lookups_do(web_settings) -> None:
    app = create_app()
    app.dependency_overrides[app_settings] = lambda: web_settings.model_copy(
        update={"api_keys": ["k1"]}
    )
    with TestClient(app, base_url="http://127.0.0.1") as client:  # a loopback Host
        assert client.get("/").status_code == 200
        assert client.get("/t/abc").status_code == 200
        assert client.get("/static/app.js").status_code == 200
        assert client.get("/hardware").status_code == 401
        assert client.get("/hardware", headers={"authorization": "Bearer k1"}).status_code == 200
        assert (
            client.get("/source", params={"release": "0.5.11", "path": "x", "start": 1}).status_code
            == 401
        )
