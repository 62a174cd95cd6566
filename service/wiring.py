"""The shared wiring of the front ends: one KB, one engine factory, one records store.

The API, the Slack bot and the CLI all build their parts here, so that a
process holds one :class:`~kb.knowledge.KnowledgeBase` per KB folder (and Chroma
URL and model) and one :class:`~kb.records.Records` per records file, whichever
front end asked first, and no front end imports another for them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kb.knowledge import KnowledgeBase
from kb.records import Records
from service.engine import Engine
from service.settings import Settings

__all__ = ["engine_for", "kb_for", "records_for"]


@lru_cache(maxsize=8)
def _kb_for(kb_path: str, chroma_url: str | None, model: str | None) -> KnowledgeBase:
    return KnowledgeBase(Settings(kb_dir=kb_path, chroma_url=chroma_url, embedding_model=model))


@lru_cache(maxsize=8)
def _records_for(kb_path: str) -> Records:
    return Records(Path(kb_path) / "records.sqlite")


def kb_for(settings: Settings) -> KnowledgeBase:
    """The process-wide KB of ``settings`` (one per KB folder, Chroma URL and model)."""
    return _kb_for(str(settings.kb_path), settings.chroma_url, settings.embedding_model)


def records_for(settings: Settings) -> Records:
    """The process-wide triage records of ``settings``' KB folder."""
    return _records_for(str(settings.kb_path))


def engine_for(settings: Settings) -> Engine:
    """An engine over :func:`kb_for` ``settings`` (engines are cheap; their caches are shared)."""
    return Engine(kb_for(settings), settings)
