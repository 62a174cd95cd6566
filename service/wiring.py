"""The shared wiring of the front ends: one KB, one engine factory, one records store.

The API, the Slack bot and the CLI all build their parts here, so that a
process holds one :class:`~kb.knowledge.KnowledgeBase` per KB folder (and Chroma
URL and model) and one :class:`~kb.records.Records` per records database (the
KB's ``records.sqlite``, or ``TRIAGE_DATABASE_URL``), whichever front end asked
first, and no front end imports another for them. :func:`jobs_for` is the
durable replay queue in that database when replay runs in workers; :func:`vectors_ok` the
KB's vector store health, re-checked at most every few seconds.
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

from kb.knowledge import KnowledgeBase
from kb.records import Records
from service.engine import Engine
from service.replay.jobs import JobQueue
from service.settings import Settings, reveal

__all__ = ["engine_for", "jobs_for", "kb_for", "records_for", "vectors_ok"]


@lru_cache(maxsize=8)
def _kb_for(kb_path: str, chroma_url: str | None, model: str | None) -> KnowledgeBase:
    return KnowledgeBase(Settings(kb_dir=kb_path, chroma_url=chroma_url, embedding_model=model))


@lru_cache(maxsize=8)
def _records_for(kb_path: str, database_url: str | None) -> Records:
    return Records(database_url or Path(kb_path) / "records.sqlite")


@lru_cache(maxsize=8)
def _jobs_for(records: Records, lease_s: float) -> JobQueue:
    return JobQueue(records.engine, lease_s=lease_s)


def kb_for(settings: Settings) -> KnowledgeBase:
    """The process-wide KB of ``settings`` (one per KB folder, Chroma URL and model)."""
    return _kb_for(str(settings.kb_path), settings.chroma_url, settings.embedding_model)


def records_for(settings: Settings) -> Records:
    """The process-wide triage records: in ``settings.database_url`` when set, else in the
    KB folder's ``records.sqlite``."""
    return _records_for(str(settings.kb_path), reveal(settings.database_url))


def jobs_for(settings: Settings, records: Records | None = None) -> JobQueue | None:
    """The durable replay queue in the records database (``records``, default
    :func:`records_for`) when replay runs in workers (``replay_queue`` "database", or
    "auto" with a ``database_url``); None when it runs in this process."""
    mode = settings.replay_queue
    if mode == "process" or (mode == "auto" and not settings.database_url):
        return None
    return _jobs_for(records or records_for(settings), settings.replay_lease_s)


def engine_for(settings: Settings) -> Engine:
    """An engine over :func:`kb_for` ``settings`` (engines are cheap; their caches are shared)."""
    return Engine(kb_for(settings), settings)


_health: dict[int, tuple[float, bool]] = {}


def vectors_ok(kb: KnowledgeBase, ttl_s: float = 5.0) -> bool:
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
