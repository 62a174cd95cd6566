"""``GET /healthz`` (the process answers) and ``GET /readyz`` (the KB holds a release; what is
degraded: Chroma, the replay sandbox). Both are open: no key."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from kb.knowledge import KnowledgeBase
from service.api.deps import get_kb
from service.wiring import vectors_ok

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(kb: Annotated[KnowledgeBase, Depends(get_kb)]) -> JSONResponse:
    releases = [r["version"] for r in kb.store.releases()]
    chroma = vectors_ok(kb, ttl_s=0.0)
    ready = bool(releases)
    from service.replay.sandbox import status as sandbox_status

    sandbox = sandbox_status()
    body = {
        "ready": ready,
        "releases": releases,
        "chroma": "ok" if chroma else "unreachable",
        "replay": {"sandbox": sandbox.available, "detail": sandbox.reason},
        "degraded": not chroma or not sandbox.available,
    }
    return JSONResponse(body, status_code=200 if ready else 503)
