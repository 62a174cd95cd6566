"""The triage web page: ``/``, permalinks ``/t/{id}``, ``/static/*`` and two small lookups.

:func:`mount_web` adds to the API app

* ``GET /`` and ``GET /t/{id}``: the same hand-written HTML page (no build step,
  no external CDN). The page reads ``/t/{id}`` from its own address and loads
  ``GET /triage/{id}``, so a permalink renders a stored triage.
* ``/static/``: the page's CSS and JavaScript, served from this package.
* ``GET /hardware``: the named hardware profiles and the model architectures
  the facts know, for the page's optional selects.
* ``GET /source?release=&path=&start=&end=``: lines of one KB file, so the
  page can expand any ``release:path:line`` citation in place.

The page and its assets need no key even when ``TRIAGE_API_KEYS`` is set (they
hold no data); the lookups are guarded like every other API endpoint, and the
page sends the key typed into its key field (kept in ``sessionStorage``).
Every HTML response carries a strict Content-Security-Policy (``'self'``
only), which also keeps the page honest about loading nothing from elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
INDEX_HTML = STATIC_DIR / "index.html"

#: Applied to the HTML page: scripts, styles, fetches and images from this origin only.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
_PAGE_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}

#: The most lines ``GET /source`` returns in one answer.
MAX_SOURCE_LINES = 400


def _page() -> FileResponse:
    return FileResponse(INDEX_HTML, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)


def web_router(require_key: Callable[..., None], get_kb: Callable[..., Any]) -> APIRouter:
    """The page routes plus ``/hardware`` and ``/source``.

    ``require_key`` and ``get_kb`` are the API's own dependencies (passed in
    rather than imported, so this package does not import the API module).
    They are local names here, so they go in parameter defaults: a string
    annotation (``from __future__ import annotations``) naming them could
    not be resolved by FastAPI.
    """
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return _page()

    @router.get("/t/{tid}", include_in_schema=False)
    def permalink(tid: str) -> FileResponse:
        """The page; it reads the id from its own address and loads the stored triage."""
        return _page()

    @router.get("/hardware", dependencies=[Depends(require_key)])
    def hardware() -> dict[str, Any]:
        """Named hardware profiles (any base with ``-xN`` works too) and known model architectures."""
        from service.engine import ARCH_BY_MODEL, PROFILES

        profiles = [p.model_dump() for p in PROFILES.values()]
        archs = sorted({arch for _, arch in ARCH_BY_MODEL})
        return {
            "profiles": profiles,
            "model_archs": archs,
            "note": "any listed GPU with -xN (e.g. h100-x2) is accepted as well",
        }

    @router.get("/source", dependencies=[Depends(require_key)])
    def source(
        release: Annotated[str, Query(min_length=1, max_length=100)],
        path: Annotated[str, Query(min_length=1, max_length=500)],
        start: Annotated[int, Query(ge=1, le=10_000_000)],
        end: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
        context: Annotated[int, Query(ge=0, le=50)] = 0,
        kb: Any = Depends(get_kb),  # noqa: B008 - a local name: see the docstring above
    ) -> dict[str, Any]:
        """Lines ``start``..``end`` (plus ``context`` around) of ``path`` in ``release``.

        Lines inside ``start``..``end`` are marked ``highlight``. 404 when the
        release or file is not in the KB; the span is capped at
        :data:`MAX_SOURCE_LINES`.
        """
        last = end if end is not None and end >= start else start
        first_shown = max(start - context, 1)
        last_shown = min(last + context, first_shown + MAX_SOURCE_LINES - 1)
        lines = kb.store.file_lines(release, path, first_shown, last_shown)
        if not lines and kb.store.file_text(release, path) is None:
            raise HTTPException(404, f"{release}:{path} is not in the KB")
        return {
            "release": release,
            "path": path,
            "start": start,
            "end": last,
            "citation": f"{release}:{path}:{start}" + (f"-{last}" if last != start else ""),
            "lines": [
                {
                    "line": first_shown + i,
                    "text": text,
                    "highlight": start <= first_shown + i <= last,
                }
                for i, text in enumerate(lines)
            ],
        }

    return router


def mount_web(app: FastAPI, require_key: Callable[..., None], get_kb: Callable[..., Any]) -> None:
    """Serve the page, its permalinks, ``/static`` and the page's lookups from ``app``."""
    app.include_router(web_router(require_key, get_kb))
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


__all__ = ["CSP", "INDEX_HTML", "MAX_SOURCE_LINES", "STATIC_DIR", "mount_web", "web_router"]
