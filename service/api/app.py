"""The HTTP API (FastAPI): ``POST /triage`` and friends.

Settings come from :func:`~service.settings.get_settings` through
``Depends(app_settings)``; the KB and engine are built once per KB folder. Tests swap them
with ``app.dependency_overrides``. Every error is JSON with a ``detail`` and,
for inputs we could not use, what *was* understood; no input produces a 500.

Endpoints: ``POST /triage`` (text/plain log or JSON ``{log, command?,
release?, hardware?, model?, python?}``), ``GET /triage/{id}``,
``POST /incidents/{id}/confirm``, ``GET /search``, ``GET /releases``,
``GET /healthz``, ``GET /readyz``, ``GET /version``, ``GET /metrics`` (:mod:`service.api.ops`);
the web page (:mod:`service.web`) at ``/``. Bearer API keys (``TRIAGE_API_KEYS``)
guard everything but the health checks, the version and the static page.
Every request gets an id and one JSON access line (:mod:`service.api.logs`) and is
counted in the metrics (:mod:`service.api.metrics`).
"""

from __future__ import annotations

import hmac
import json
import re
import time
import uuid
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from kb.errors import ConfigError, ReleaseNotIngested, TriageError, VectorStoreError
from kb.knowledge import KnowledgeBase
from kb.records import ConfirmRefused, Records, new_triage_id
from service import ondemand
from service.api import access, metrics, responses, storage
from service.api.docs import mount_docs
from service.api.guard import RequestGuard, allowed_hosts
from service.api.limits import triage_rate_limit
from service.api.logs import REQUEST_ID, log_access
from service.api.ops import app_version, mount_ops
from service.api.schemas import ConfirmRequest, TriageRequest
from service.engine import Engine, TriageResult, redact, redact_payload
from service.errors import BinaryInput, EmptyInput, InputTooLarge, LogParseError, UnknownRelease
from service.settings import Settings, get_settings, reveal
from service.wiring import jobs_for, kb_for, records_for

__all__ = [
    "MAX_KEY_FAILURES",
    "RequestIdMiddleware",
    "app",
    "app_settings",
    "create_app",
    "get_engine",
    "get_kb",
    "get_records",
    "key_ok",
    "require_key",
]

_STATUS: list[tuple[type[TriageError], int]] = [
    (EmptyInput, 400),
    (BinaryInput, 415),
    (InputTooLarge, 413),
    (LogParseError, 422),
    (ReleaseNotIngested, 404),
    (UnknownRelease, 422),
    (ConfigError, 400),
    (VectorStoreError, 503),
]

EXAMPLE_LOG = (
    "python -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 "
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path /models/eagle3 "
    "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/site-packages/sglang/srt/server_args.py", line 3519, '
    "in _handle_speculative_decoding\n    assert (\nAssertionError\n"
)


# The dependencies are ``async`` although they do not await: FastAPI runs a sync
# dependency on a worker thread, and these are cheap lookups that would spend
# more on the thread hop than on their work.
async def app_settings() -> Settings:
    """The process-wide :func:`~service.settings.get_settings` (tests override this)."""
    return get_settings()


async def get_kb(settings: Annotated[Settings, Depends(app_settings)]) -> KnowledgeBase:
    return kb_for(settings)


async def get_engine(
    kb: Annotated[KnowledgeBase, Depends(get_kb)],
    settings: Annotated[Settings, Depends(app_settings)],
) -> Engine:
    return Engine(kb, settings)


async def get_records(settings: Annotated[Settings, Depends(app_settings)]) -> Records:
    return records_for(settings)


#: Wrong keys one address may send in a minute before wrong keys get 429 (valid keys pass).
MAX_KEY_FAILURES = access.MAX_KEY_FAILURES


def key_ok(token: str, keys: list[str]) -> bool:
    """Is ``token`` one of ``keys``? Compared in constant time, every key tried."""
    given = token.encode()
    return any([hmac.compare_digest(given, k.encode()) for k in keys])  # noqa: C419 - no short cut


def _client(request: Request) -> str:
    """Who sent ``request``, for per-client limits (the peer's address)."""
    return request.client.host if request.client else "unknown"


async def require_key(
    request: Request, settings: Annotated[Settings, Depends(app_settings)]
) -> None:
    """Admit a request with a valid key (or any on an open service), else 401/429; the
    caller is kept for ownership checks (:func:`service.api.access.check_key`)."""
    access.check_key(request, settings)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API. ``settings`` (default: the process's) configure what is fixed when the app is
    built: the request guard, Slack; requests read theirs through :func:`app_settings`."""
    app = FastAPI(
        title="sglang-triage",
        version=app_version(),
        description="Why did SGLang refuse to start, and which flag change fixes it?",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )  # see service.api.docs

    settings = settings or get_settings()
    app.add_middleware(
        RequestGuard,
        hosts=allowed_hosts(settings.allowed_hosts, settings.public_url),
        origins=frozenset({settings.public_url.rstrip("/").lower()}),
        max_body_bytes=settings.max_body_bytes,
    )
    app.add_middleware(RequestIdMiddleware)  # outermost: every answer gets its request id

    @app.exception_handler(TriageError)
    async def triage_error(_: Request, exc: TriageError) -> JSONResponse:
        status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 422)
        return JSONResponse(
            {"detail": exc.message, "error": type(exc).__name__, **exc.details}, status_code=status
        )

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz(kb: Annotated[KnowledgeBase, Depends(get_kb)]) -> JSONResponse:
        releases = [r["version"] for r in kb.store.releases()]
        chroma = _vectors_ok(kb, ttl_s=0.0)
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

    @app.get("/releases", dependencies=[Depends(require_key)])
    def releases(kb: Annotated[KnowledgeBase, Depends(get_kb)]) -> list[dict[str, Any]]:
        return kb.store.releases()

    @app.get("/search", dependencies=[Depends(require_key)])
    def search(
        q: Annotated[str, Query(min_length=1, max_length=2000)],
        release: str,
        kb: Annotated[KnowledgeBase, Depends(get_kb)],
        k: Annotated[int, Query(ge=1, le=50)] = 5,
    ) -> dict[str, Any]:
        from kb.search import hybrid_search

        return hybrid_search(kb, q, release, k=k).as_dict()

    @app.post(
        "/triage",
        dependencies=[
            Depends(require_key),
            Depends(triage_rate_limit(app_settings, access.rate_bucket)),
        ],
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
                        "schema": TriageRequest.model_json_schema(),
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
        engine: Annotated[Engine, Depends(get_engine)],
        records: Annotated[Records, Depends(get_records)],
        release: str | None = None,
        hardware: str | None = None,
        model: str | None = None,
        model_arch: str | None = None,
        replay: bool = True,
    ) -> Response:
        body = await _read_limited(request, settings.max_body_bytes)
        payload: str | dict[str, Any]
        ctype = request.headers.get("content-type", "text/plain").split(";")[0].strip().lower()
        if ctype == "application/json":
            try:
                data = getattr(request.state, "json_body", None)  # decoded by the guard
                if data is None:
                    data = json.loads(body.decode("utf-8"))
                req = TriageRequest.model_validate(data)
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
            text = req.log
        else:
            if b"\x00" in body:
                raise BinaryInput("the body holds NUL bytes: send the crash log as UTF-8 text")
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BinaryInput("the body is not UTF-8 text") from exc
            payload = text
        options = {
            "release": release,
            "hardware": hardware,
            "model": model,
            "model_arch": model_arch,
        }
        body = await run_in_threadpool(
            _answer,
            engine,
            records,
            settings,
            payload,
            text,
            options,
            replay,
            _client(request),
            access.caller_of(request, settings),
        )
        return Response(body, media_type="application/json")

    @app.post(
        "/lint",
        dependencies=[Depends(require_key)],
        openapi_extra={
            "requestBody": {
                "content": {
                    "application/json": {
                        "example": {
                            "release": "0.5.11",
                            "hardware": "rtx-pro-6000-x8",
                            "command": "python -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 "
                            "--speculative-algorithm EAGLE3 --speculative-eagle-topk 4",
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

    @app.get("/rules", dependencies=[Depends(require_key)])
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

    @app.get("/triage/{tid}", dependencies=[Depends(require_key)])
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

    @app.post("/incidents/{tid}/confirm", dependencies=[Depends(require_key)])
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
        unknown = _unknown_flags(kb, rec, body.flags())
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

    @app.get(
        "/incidents", dependencies=[Depends(require_key)], response_class=responses.NDJSONResponse
    )
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
            for i in access.readable_incidents(
                access.caller_of(request, settings), incidents, records
            )
        ]
        return responses.NDJSONResponse("".join(lines))

    from service.web import mount_web

    mount_web(app, require_key, get_kb)  # the page at / and /t/{id}, /static, /hardware, /source
    mount_docs(app, require_key)  # /openapi.json and /docs, local assets, behind the keys
    mount_ops(app, require_key)  # /metrics behind the keys, /version open
    responses.install(app)  # short 422s; the error answers in /openapi.json
    if reveal(settings.slack_bot_token) and reveal(settings.slack_signing_secret):
        from service.slack.bot import mount_slack

        mount_slack(app, settings)
    return app


def _unknown_flags(kb: KnowledgeBase, rec: dict[str, Any], flags: list[str]) -> list[str]:
    """The ``flags`` that the release of stored triage ``rec`` does not know (none when the
    release is not in the KB any more: nothing to check against)."""
    release = ((rec.get("result") or {}).get("release") or {}).get("release")
    if not flags or not release or kb.store.release(release) is None:
        return []
    from kb.catalogs import load_catalog

    catalog = load_catalog(kb.store, release)
    spellings, attrs = catalog.by_flag(), catalog.by_attr()
    return [f for f in flags if f not in spellings and f.lstrip("-").replace("-", "_") not in attrs]


#: Stored triages between two purges of the records (retention limits).
PURGE_EVERY = storage.PURGE_EVERY


def _answer(
    engine: Engine,
    records: Records,
    settings: Settings,
    payload: str | dict[str, Any],
    text: str,
    options: dict[str, str | None],
    replay: bool,
    client: str = "local",
    caller: access.Caller | None = None,
) -> bytes:
    """Triage, store and encode one answer (on a worker thread: all of it blocks).

    The answer is encoded to JSON once; the same text is stored and returned. The replay
    runs on this process's queue, or, with a durable queue (:func:`~service.wiring.jobs_for`:
    ``TRIAGE_DATABASE_URL`` or ``TRIAGE_REPLAY_QUEUE=database``), is queued for
    ``sglang-triage replay-worker``, which stores the same verdicts in the same record.
    The record is owned by ``caller``; ``similar`` names only triages it may read, and when
    the records' disk is nearly full the answer is returned unstored (:mod:`.storage`).
    """
    caller = caller or access.Caller(owner=f"client:{client}")
    # redacted once per request, here on the worker thread: the parses and the stored record
    # below get the same redacted text, and redact() returns redacted text as it is
    payload = redact_payload(payload)
    log = payload if isinstance(payload, str) else payload.get("log")
    text = log if isinstance(log, str) else redact(text)

    def landed(updated: TriageResult) -> None:  # triaged again once its release is ingested
        updated.id = tid
        records.save(tid, request_record, updated.model_dump_json())

    late = ondemand.LateAnswer(landed)  # delivers only after the first answer is stored
    result = ondemand.triage(
        engine, settings, payload, **options, replay=replay, client=caller.owner, on_update=late
    )  # budgets: per key or address
    metrics.observe_triage(result.timings_ms, result.status)
    tid = new_triage_id()
    result.id = tid
    if not _vectors_ok(engine.kb):
        result.degraded.append("vector store unreachable: search falls back to keywords")
    if result.location is not None:
        similar = records.similar(
            result.location.path,
            result.location.function,
            exclude=tid,
            # open service: other people's triages are not linked; with keys, only readable ones
            show_id=lambda owner: caller.keyed and access.may_read(caller, owner),
        )
        result.similar = redact_payload(similar)  # notes stored before they were redacted
    request_record = {"options": options, "log": redact(text)[:200_000]}
    refused = storage.disk_refusal(records, settings)
    if refused:
        result.id = None
        result.degraded.append(refused)
    wants_replay = (
        replay
        and result.status == "located"
        and settings.replay_enabled
        and not refused
        and not ondemand.ingesting(result)
    )
    if wants_replay:
        result.replay = {
            "status": "pending",
            "detail": f"GET /triage/{tid} shows the replay verdicts when done",
        }
    encoded = result.model_dump_json()
    # stored before the replay starts: a replay answered from its cache may finish (and
    # store its verdicts) at once, and must not be overwritten by this "pending" record
    if refused:
        return encoded.encode("utf-8")
    stored = records.save(tid, request_record, encoded, owner=caller.owner)
    if wants_replay:
        from service.replay.background import schedule, unavailable_reason
        from service.replay.queue import QueueFull

        jobs = jobs_for(settings, records)  # None: replay runs in this process
        try:
            if jobs is not None:  # a durable job for `sglang-triage replay-worker`
                fut = jobs.enqueue_triage(
                    tid,
                    json.loads(encoded),
                    list(result.parsed.command or []),
                    result.parsed.hardware,
                    result.parsed.model_arch,
                    client=client,
                )
            else:
                fut = schedule(
                    settings,
                    json.loads(encoded),
                    list(result.parsed.command or []),
                    result.parsed.hardware,
                    result.parsed.model_arch,
                    lambda updated: records.save(tid, request_record, updated),
                    client=client,
                )
        except QueueFull as exc:
            result.replay = {"status": "unverified", "detail": f"{exc.message}; try again later"}
        else:
            if fut is None:
                release = (result.release or {}).get("release")
                argv = list(result.parsed.command or [])
                why = (
                    jobs.unavailable_reason(release, argv)
                    if jobs is not None
                    else unavailable_reason(settings, release, argv)
                )
                result.replay = {
                    "status": "unavailable",
                    "detail": why or "replay could not be scheduled",
                }
        if result.replay.get("status") != "pending":
            encoded = result.model_dump_json()
            records.save(tid, request_record, encoded)
    late.ready()
    storage.retention.stored(records, settings, stored)
    return encoded.encode("utf-8")


class RequestIdMiddleware:
    """Gives every HTTP response an ``x-request-id`` (the client's, if sane), makes it the
    request id of every log line written while the request is served
    (:data:`~service.api.logs.REQUEST_ID`), logs one access line (method, path, status,
    duration_ms, client) and counts the request in the metrics by its route template.

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` would add a task
    and a stream copy to every request.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _request_id(dict(scope.get("headers") or ()).get(b"x-request-id", b""))
        token = REQUEST_ID.set(rid.decode())
        t0 = time.perf_counter()
        status = 500

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - t0
            metrics.observe_request(scope, status, seconds)
            client = scope.get("client")
            log_access(
                request_id=rid.decode(),
                method=str(scope.get("method")),
                path=str(scope.get("path")),
                status=status,
                duration_ms=round(seconds * 1000, 2),
                client=str(client[0]) if client else None,
            )
            REQUEST_ID.reset(token)


_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")


def _request_id(given: bytes) -> bytes:
    """The client's request id when it is short and plain, else a fresh one."""
    return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:12].encode()


_health: dict[int, tuple[float, bool]] = {}


def _vectors_ok(kb: KnowledgeBase, ttl_s: float = 5.0) -> bool:
    """Chroma's health, re-checked at most every ``ttl_s`` seconds per KB."""
    now = time.monotonic()
    hit = _health.get(id(kb))
    if hit is None or now - hit[0] > ttl_s:
        ok = kb.vectors_ok()
        if not ok:
            kb.reset_vectors()  # reconnect on the next check
        hit = (now, ok)
        _health[id(kb)] = hit
    return hit[1]


async def _read_limited(request: Request, limit: int) -> bytes:
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


app = create_app()
