"""A release's flag catalog, read back from the KB (never by importing SGLang)."""

from __future__ import annotations

import threading

from ..ingest.catalog import Catalog, Declaration, FlagSpec
from .store import Store

_lock = threading.Lock()
_cache: dict[tuple[str, str, str], Catalog] = {}


def load_catalog(store: Store, version: str) -> Catalog:
    """The :class:`Catalog` of ``version``; cached per KB file and content hash."""
    rel = store.require(version)
    key = (str(store.path), version, rel["content_hash"])
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    data = store.catalog_json(version)
    catalog = Catalog(
        flags=[FlagSpec(**f) for f in data["flags"]],
        declarations=[Declaration(**d) for d in data["declarations"]],
    )
    with _lock:
        _cache[key] = catalog
    return catalog
