"""The OpenAPI document and Swagger UI, served from this machine and behind the API keys.

FastAPI's default ``/docs`` loads Swagger UI from a CDN; here its files come
from the ``swagger-ui-bundle`` package (``/docs/assets``), so the page works
offline and no third party learns who reads it. With ``TRIAGE_API_KEYS`` set,
``/openapi.json`` and ``/docs`` need a key like every other route.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["mount_docs"]


def mount_docs(app: FastAPI, require_key: Callable[..., Any]) -> None:
    """Add ``/openapi.json``, ``/docs`` and ``/docs/assets`` (the app is built without them)."""
    import swagger_ui_bundle

    app.mount(
        "/docs/assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets"
    )

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_key)])
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(require_key)])
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
        )
