"""Reading the KB: ``GET /releases``, ``GET /search`` (hybrid search over one release's
source), ``POST /lint`` (a launch command against the rule cards) and ``GET /rules``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query

from kb.knowledge import KnowledgeBase
from service.api.deps import get_kb, require_key

__all__ = ["router"]

router = APIRouter(dependencies=[Depends(require_key)])


@router.get("/releases")
def releases(kb: Annotated[KnowledgeBase, Depends(get_kb)]) -> list[dict[str, Any]]:
    return kb.store.releases()


@router.get("/search")
def search(
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    release: str,
    kb: Annotated[KnowledgeBase, Depends(get_kb)],
    k: Annotated[int, Query(ge=1, le=50)] = 5,
) -> dict[str, Any]:
    from kb.search import hybrid_search

    return hybrid_search(kb, q, release, k=k).as_dict()


@router.post(
    "/lint",
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {
                    "example": {
                        "release": "0.5.11",
                        "hardware": "rtx-pro-6000-x8",
                        "command": "python -m sglang.launch_server --model-path /models/Kimi-K2.6 "
                        "--tp 8 --speculative-algorithm EAGLE3 --speculative-eagle-topk 4",
                    }
                }
            }
        }
    },
)
def lint(body: dict[str, Any], kb: Annotated[KnowledgeBase, Depends(get_kb)]) -> dict[str, Any]:
    from service.engine import lint_payload

    try:
        return lint_payload(kb.store, body)
    except ValueError as exc:
        raise HTTPException(422, str(exc)[:500]) from exc


@router.get("/rules")
def rules(
    kb: Annotated[KnowledgeBase, Depends(get_kb)],
    release: str | None = None,
    origin: str | None = None,
    severity: str | None = None,
    q: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> dict[str, Any]:
    from service.engine import rules_payload

    return rules_payload(
        kb.store,
        release=release,
        origin=origin,
        severity=severity,
        q=q,
        limit=limit,
        offset=offset,
    )
