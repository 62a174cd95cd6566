"""Error answers that stay short, and an OpenAPI document that lists them.

* :func:`validation_error` — FastAPI's answer to a request that fails its model echoes the
  whole input back (an 878 KB command in, an 878 KB 422 out); here each error keeps at most
  :data:`ECHO_CHARS` characters of the input it names.
* :func:`declare_errors` — adds to every documented route the error statuses it can answer
  (the request guard's 400/403/408/413, the key check's 401/429, 404, 415, 422, 503),
  with the JSON error body's schema, so a client (or schemathesis' conformance checks)
  reading ``/openapi.json`` is told the truth.
* :class:`NDJSONResponse` — ``application/x-ndjson`` (``GET /incidents``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel

__all__ = [
    "ECHO_CHARS",
    "ErrorBody",
    "NDJSONResponse",
    "declare_errors",
    "install",
    "short_input",
    "validation_error",
]

#: At most this many characters of a client's input are echoed in an error.
ECHO_CHARS = 200


class ErrorBody(BaseModel):
    """Every error answer: what went wrong (``detail``: text, or a list of field errors)
    and its kind (``error``); some add what was understood (``understood``, ``limit``)."""

    detail: Any
    error: str | None = None


class NDJSONResponse(PlainTextResponse):
    """JSON lines (one object per line)."""

    media_type = "application/x-ndjson"


_WHY = {
    400: "Bad request: a Host not served here, an empty body, a bad hardware name",
    401: "Missing or wrong bearer API key",
    403: "A cross-site request from a browser, or not the owner of the triage",
    404: "Not found (or not readable with this key)",
    408: "The request body did not arrive in time",
    413: "The body is over the size limit",
    415: "The body is not UTF-8 text",
    422: "The request was understood but cannot be used",
    429: "Too many requests (see Retry-After)",
    503: "A backing store (vectors) is unreachable",
}


def short_input(value: Any, limit: int = ECHO_CHARS) -> Any:
    """``value`` when it is short, else the first ``limit`` characters of its text (JSON)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with the field errors, each echoing at most :data:`ECHO_CHARS` of the input."""
    errors = []
    for err in exc.errors()[:20]:
        item = {k: v for k, v in err.items() if k not in ("input", "ctx", "url")}
        item["msg"] = str(item.get("msg", ""))[:500]
        item["loc"] = [str(p)[:100] for p in item.get("loc", ())][:10]
        if "input" in err:
            item["input"] = short_input(err["input"])
        errors.append(item)
    return JSONResponse({"detail": errors, "error": "RequestValidationError"}, status_code=422)


#: Documented routes open without a key (everything else is behind the keys when set).
OPEN_ROUTES = frozenset({"/healthz", "/readyz", "/version"})


def _statuses(path: str, method: str, op: dict[str, Any]) -> set[int]:
    """The error statuses ``method path`` may answer (see the module doc)."""
    codes = {400}
    params = op.get("parameters") or []
    if path not in OPEN_ROUTES:
        codes |= {401, 404, 422, 429, 503}
    if method in ("post", "put", "patch", "delete"):
        codes |= {403, 408, 413, 415, 422}
    if any(p.get("in") == "path" for p in params):
        codes |= {404}
    if params or "requestBody" in op:
        codes |= {422}
    if path == "/readyz":
        codes |= {503}
    return codes


def declare_errors(app: FastAPI) -> None:
    """Make ``app.openapi()`` list, on each documented operation, the error statuses it
    answers (``ErrorBody`` in ``components.schemas``; a status already documented is kept)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if getattr(app, "_errors_declared", False) and app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        schema.setdefault("components", {}).setdefault("schemas", {})["ErrorBody"] = (
            ErrorBody.model_json_schema()
        )
        ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        for path, item in schema.get("paths", {}).items():
            for method, op in item.items():
                if not isinstance(op, dict) or method not in _METHODS:
                    continue
                answers = op.setdefault("responses", {})
                for code in sorted(_statuses(path, method, op)):
                    answers.setdefault(str(code), {"description": _WHY[code], "content": ref})
        app.openapi_schema = schema
        app._errors_declared = True  # type: ignore[attr-defined]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def install(app: FastAPI) -> None:
    """The short validation errors and the declared error responses (call last, once every
    route is mounted)."""
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    declare_errors(app)
