"""JSON-lines logs: one JSON object per line, with the request id of the request that logged it.

:class:`JsonFormatter` renders every record as ``{"ts", "level", "logger", "msg"}`` plus
``request_id`` while a request is being served (:data:`REQUEST_ID`, set by
:class:`~service.api.app.RequestIdMiddleware` for the request's whole life, worker threads
included: Starlette copies the context into them), ``exc`` with the traceback when there is one,
and the fields a record carries in ``extra={"fields": {...}}``. Access lines
(:func:`log_access`, logger ``sglang_triage.access``) carry ``method``, ``path``, ``status``,
``duration_ms`` and ``client``.

``sglang-triage serve`` installs it for every logger (uvicorn's, ours and the root) through
:func:`log_config`; tests and embedders that configure logging themselves get plain records.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar
from typing import Any

__all__ = [
    "ACCESS_LOGGER",
    "REQUEST_ID",
    "JsonFormatter",
    "json_handler",
    "log_access",
    "log_config",
]

#: The id of the request being served (``None`` outside a request).
REQUEST_ID: ContextVar[str | None] = ContextVar("sglang_triage_request_id", default=None)

#: The logger of the one line per request.
ACCESS_LOGGER = "sglang_triage.access"

_access = logging.getLogger(ACCESS_LOGGER)


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (keys: ts, level, logger, msg, request_id, ...).

    ``ts`` is UTC, ISO 8601 with milliseconds. Values that are not JSON are written with
    ``str``; a message with a newline stays on one line (JSON escapes it).
    """

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or REQUEST_ID.get()
        if rid:
            line["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def log_access(
    *, request_id: str, method: str, path: str, status: int, duration_ms: float, client: str | None
) -> None:
    """Log one access line (INFO on ``sglang_triage.access``) with its fields."""
    if _access.isEnabledFor(logging.INFO):
        _access.info(
            "%s %s %s",
            method,
            path,
            status,
            extra={
                "request_id": request_id,
                "fields": {
                    "method": method,
                    "path": path,
                    "status": status,
                    "duration_ms": duration_ms,
                    "client": client,
                },
            },
        )


def json_handler() -> logging.Handler:
    """A stderr handler of JSON lines; Python warnings become log records too (logger
    ``py.warnings``), so nothing on stderr is plain text. Built by :func:`log_config`'s
    ``dictConfig`` in every process that applies it (each uvicorn worker does)."""
    logging.captureWarnings(True)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    return handler


def log_config(access_log: bool = True, level: str = "INFO") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` for ``uvicorn.run(log_config=...)``: JSON lines on
    stderr for every logger.

    uvicorn's own access log is replaced by ours (it lacks the request id and the duration):
    ``serve`` runs uvicorn with ``access_log=False``, and ``access_log=False`` here also
    silences ours. Libraries that log through the root logger (Chroma, httpx) are JSON too, from
    WARNING up.
    """
    handler = {"()": "service.api.logs.json_handler", "formatter": "json"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "service.api.logs.JsonFormatter"}},
        "handlers": {"json": handler},
        "loggers": {
            "uvicorn": {"handlers": ["json"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["json"], "level": level, "propagate": False},
            "sglang_triage": {"handlers": ["json"], "level": level, "propagate": False},
            ACCESS_LOGGER: {"level": level if access_log else "WARNING"},
        },
        "root": {"handlers": ["json"], "level": "WARNING"},
    }
