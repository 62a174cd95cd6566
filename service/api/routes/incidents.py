"""Confirmed fixes: ``POST /incidents/{id}/confirm`` records which fix resolved a stored
triage (owners only: :mod:`service.api.access`), ``GET /incidents`` exports the confirmed
triages as eval incidents (JSONL)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import Response

from kb.knowledge import KnowledgeBase
from kb.records import ConfirmRefused, Records
from service.api import access, responses
from service.api.deps import app_settings, get_kb, get_records, require_key
from service.api.schemas import ConfirmRequest
from service.engine import redact_payload
from service.settings import Settings

__all__ = ["router", "unknown_flags"]

router = APIRouter(dependencies=[Depends(require_key)])


@router.post("/incidents/{tid}/confirm")
def confirm(
    tid: str,
    body: ConfirmRequest,
    request: Request,
    records: Annotated[Records, Depends(get_records)],
    kb: Annotated[KnowledgeBase, Depends(get_kb)],
    settings: Annotated[Settings, Depends(app_settings)],
) -> dict[str, Any]:
    caller = access.caller_of(request, settings)
    owners = records.owners(tid)
    rec = records.get(tid) if owners is not None else None
    if rec is None or not access.may_read(caller, owners[0]):
        raise HTTPException(404, f"no stored triage {tid[:100]}")
    unknown = unknown_flags(kb, rec, body.flags())
    if unknown:
        raise HTTPException(422, f"not flags of the triage's release: {', '.join(unknown)}")
    fix, note = access.redact_confirmation(body.fix_dict(), body.note, settings)
    try:
        stored = records.confirm(
            tid,
            fix,
            note,
            source=body.source,
            owner=caller.owner,
            check=lambda t, done, c: access.confirm_refusal(caller, t, done, c),
        )
    except ConfirmRefused as exc:
        raise HTTPException(403, exc.message) from exc
    if not stored:
        raise HTTPException(404, f"no stored triage {tid[:100]}")
    return {"id": tid, "confirmed": True}


@router.get("/incidents", response_class=responses.NDJSONResponse)
def export(
    request: Request,
    records: Annotated[Records, Depends(get_records)],
    kb: Annotated[KnowledgeBase, Depends(get_kb)],
    settings: Annotated[Settings, Depends(app_settings)],
    source: Literal["api", "web", "slack"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> Response:
    """Confirmed triages as eval incidents, JSONL (``sglang-triage eval --incidents``),
    a page at a time (``limit``/``offset`` over the confirmations, oldest first); with
    keys, only the caller's own triages (a team key: all), so a page may be short."""
    from kb.recording import export_confirmed

    incidents = export_confirmed(records, kb.store, source=source, limit=limit, offset=offset)
    lines = [
        json.dumps(redact_payload(i.model_dump(mode="json")), ensure_ascii=False) + "\n"
        for i in access.readable_incidents(access.caller_of(request, settings), incidents, records)
    ]
    return responses.NDJSONResponse("".join(lines))


def unknown_flags(kb: KnowledgeBase, rec: dict[str, Any], flags: list[str]) -> list[str]:
    """The ``flags`` that the release of stored triage ``rec`` does not know (none when the
    release is not in the KB any more: nothing to check against)."""
    release = ((rec.get("result") or {}).get("release") or {}).get("release")
    if not flags or not release or kb.store.release(release) is None:
        return []
    from kb.catalogs import load_catalog

    catalog = load_catalog(kb.store, release)
    spellings, attrs = catalog.by_flag(), catalog.by_attr()
    return [f for f in flags if f not in spellings and f.lstrip("-").replace("-", "_") not in attrs]
