"""The API's FastAPI dependencies: settings, KB, engine, records, the triage use case, keys.

Settings come from :func:`~service.settings.get_settings` through ``Depends(app_settings)``;
the KB and records are the process's (:mod:`service.wiring`), one per KB folder. Tests swap
any of them with ``app.dependency_overrides``.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from kb.knowledge import KnowledgeBase
from kb.records import Records
from service.api import access
from service.engine import Engine
from service.settings import Settings, get_settings
from service.usecase import TriageUseCase
from service.wiring import kb_for, records_for

__all__ = [
    "MAX_KEY_FAILURES",
    "app_settings",
    "get_engine",
    "get_kb",
    "get_records",
    "get_triage_usecase",
    "key_ok",
    "require_key",
]


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


async def get_triage_usecase(
    engine: Annotated[Engine, Depends(get_engine)],
    settings: Annotated[Settings, Depends(app_settings)],
    records: Annotated[Records, Depends(get_records)],
) -> TriageUseCase:
    """The triage use case over the request's engine, settings and records."""
    return TriageUseCase(engine, settings, records)


#: Wrong keys one address may send in a minute before wrong keys get 429 (valid keys pass).
MAX_KEY_FAILURES = access.MAX_KEY_FAILURES


def key_ok(token: str, keys: list[str]) -> bool:
    """Is ``token`` one of ``keys``? Compared in constant time, every key tried."""
    given = token.encode()
    return any([hmac.compare_digest(given, k.encode()) for k in keys])


async def require_key(
    request: Request, settings: Annotated[Settings, Depends(app_settings)]
) -> None:
    """Admit a request with a valid key (or any on an open service), else 401/429; the
    caller is kept for ownership checks (:func:`service.api.access.check_key`)."""
    access.check_key(request, settings)
