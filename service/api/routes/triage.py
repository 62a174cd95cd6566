"""``POST /triage`` (a crash log in, the diagnosis out, stored under a new id) and
``GET /triage/{id}`` (a stored triage, with its replay verdicts once they are in).

The route reads the body (text/plain, or JSON ``{log, command?, release?, hardware?,
model?, python?}``) and hands it to the triage use case
(:meth:`~service.usecase.TriageUseCase.answer_and_store`) on a worker thread: the answer is
encoded to JSON once, and the same text is stored and returned.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from kb.records import Records
from service.api import access, metrics, schemas
from service.api.deps import app_settings, get_records, get_triage_usecase, require_key
from service.api.limits import triage_rate_limit
from service.engine import TriageResult
from service.errors import BinaryInput, EmptyInput, InputTooLarge
from service.settings import Settings
from service.usecase import Keep, TriageRequest, TriageUseCase

__all__ = ["EXAMPLE_LOG", "answer", "read_limited", "router"]

EXAMPLE_LOG = (
    "python -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 "
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path /models/eagle3 "
    "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/site-packages/sglang/srt/server_args.py", line 3519, '
    "in _handle_speculative_decoding\n    assert (\nAssertionError\n"
)

router = APIRouter(dependencies=[Depends(require_key)])


@router.post(
    "/triage",
    dependencies=[Depends(triage_rate_limit(app_settings, access.rate_bucket))],
    response_class=Response,
    responses={
        200: {
            "model": TriageResult,
            "description": "The diagnosis, with its "
            "`id` (`GET /triage/{id}` shows it again, with replay verdicts)",
        }
    },
    openapi_extra={
        "requestBody": {
            "content": {
                "text/plain": {"schema": {"type": "string"}, "example": EXAMPLE_LOG},
                "application/json": {
                    "schema": schemas.TriageRequest.model_json_schema(),
                    "example": {
                        "log": EXAMPLE_LOG,
                        "release": "0.5.11",
                        "hardware": "rtx-pro-6000-x8",
                    },
                },
            },
            "required": True,
        }
    },
)
async def triage(
    request: Request,
    settings: Annotated[Settings, Depends(app_settings)],
    usecase: Annotated[TriageUseCase, Depends(get_triage_usecase)],
    release: str | None = None,
    hardware: str | None = None,
    model: str | None = None,
    model_arch: str | None = None,
    replay: bool = True,
) -> Response:
    body = await read_limited(request, settings.max_body_bytes)
    payload: str | dict[str, Any]
    ctype = request.headers.get("content-type", "text/plain").split(";")[0].strip().lower()
    if ctype == "application/json":
        try:
            data = getattr(request.state, "json_body", None)  # decoded by the guard
            if data is None:
                data = json.loads(body.decode("utf-8"))
            req = schemas.TriageRequest.model_validate(data)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise HTTPException(
                422,
                f"invalid JSON body: {str(exc)[:300] or type(exc).__name__}",
            ) from exc
        payload = req.model_dump(exclude_none=True)
        if isinstance(req.command, list):
            payload["command"] = " ".join(req.command)
        release = release or req.release
        hardware = hardware or req.hardware
        model_arch = model_arch or req.model_arch
    else:
        if b"\x00" in body:
            raise BinaryInput("the body holds NUL bytes: send the crash log as UTF-8 text")
        try:
            payload = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BinaryInput("the body is not UTF-8 text") from exc
    caller = access.caller_of(request, settings)
    ask = TriageRequest(
        payload,
        release=release,
        hardware=hardware,
        model=model,
        model_arch=model_arch,
        replay=replay,
        client=caller.owner,  # on-demand budgets: per key or address
    )
    encoded = await run_in_threadpool(answer, usecase, ask, caller, access.client_address(request))
    return Response(encoded, media_type="application/json")


def answer(
    usecase: TriageUseCase, ask: TriageRequest, caller: access.Caller, client: str = "local"
) -> bytes:
    """Triage, store and encode one answer (on a worker thread: all of it blocks).

    The record is owned by ``caller``; ``similar`` names only triages it may read (on an open
    service none: other people's triages are not linked). The replay takes ``client``'s
    (the peer address's) share of the queue.
    """
    keep = Keep(
        owner=caller.owner,
        show_id=lambda owner: caller.keyed and access.may_read(caller, owner),
        replay_client=client,
    )
    stored = usecase.answer_and_store(ask, keep)
    metrics.observe_triage(stored.result.timings_ms, stored.result.status)
    return stored.encoded.encode("utf-8")


@router.get("/triage/{tid}")
def get_triage(
    tid: str,
    request: Request,
    records: Annotated[Records, Depends(get_records)],
    settings: Annotated[Settings, Depends(app_settings)],
) -> dict[str, Any]:
    owners = records.owners(tid)
    rec = records.get(tid) if owners is not None else None
    if rec is None or not access.may_read(access.caller_of(request, settings), owners[0]):
        raise HTTPException(404, f"no stored triage {tid[:100]}")
    return rec


async def read_limited(request: Request, limit: int) -> bytes:
    """The request body, refused past ``limit`` bytes (413) and when empty (400)."""
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > limit:
        raise InputTooLarge(
            f"the body is {int(length)} bytes; the limit is {limit}", details={"limit": limit}
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InputTooLarge(
                f"the body exceeds the limit of {limit} bytes", details={"limit": limit}
            )
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        raise EmptyInput('the body is empty: POST the crash log as text/plain or JSON {"log": ...}')
    return body
