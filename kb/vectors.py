"""The vector side of the KB: Chroma, embedded or as a ``chroma run`` server.

Embedded mode keeps a ``PersistentClient`` in ``<kb>/chroma``; server mode
(``TRIAGE_CHROMA_URL=http://host:port``) uses ``HttpClient``, which is what
several API worker processes should share. Chroma is always handed our own
vectors (``embeddings=`` / ``query_embeddings=``); the collection is created
with ``embedding_function=None`` so Chroma's default embedder, which would
download a model, is never used. Telemetry is off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from kb.errors import VectorStoreError

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

COLLECTION = "sglang-chunks"


def _text_hash(meta: Mapping[str, object] | None) -> str | None:
    """The ``text_hash`` a vector's metadata records (None when it has none)."""
    found = meta.get("text_hash") if meta else None
    return found if isinstance(found, str) else None


class VectorStore:
    """One Chroma collection of chunk vectors; ids are ``<release>:<chunk id>``.

    Each vector's metadata names its release, path, qualname, lines, kind and
    the ``text_hash`` of the text it embeds, so ingest can tell a current
    vector from one left by older chunking.
    """

    def __init__(self, *, path: Path | None = None, url: str | None = None) -> None:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        settings = ChromaSettings(anonymized_telemetry=False)
        try:
            if url:
                parsed = urlparse(url)
                self.client = chromadb.HttpClient(
                    host=parsed.hostname or "127.0.0.1",
                    port=parsed.port or 8000,
                    ssl=parsed.scheme == "https",
                    settings=settings,
                )
                self.where = url
            else:
                assert path is not None
                path.mkdir(parents=True, exist_ok=True)
                self.client = chromadb.PersistentClient(path=str(path), settings=settings)
                self.where = str(path)
            self.collection = self.client.get_or_create_collection(
                COLLECTION,
                embedding_function=None,
                metadata={"hnsw:space": "cosine"},
            )
        except Exception as exc:  # chromadb raises many types (httpx, ValueError, ...)
            raise VectorStoreError(f"Chroma at {url or path} is not usable: {exc}") from exc

    def heartbeat(self) -> bool:
        try:
            self.client.heartbeat()
            return True
        except Exception:
            return False

    def release_hashes(self, release: str) -> dict[str, str | None]:
        """Every stored id of ``release`` with the ``text_hash`` its vector was made from
        (None for vectors stored without one)."""
        try:
            got = self.collection.get(where={"release": release}, include=["metadatas"])
        except Exception as exc:
            raise VectorStoreError(f"Chroma get failed: {exc}") from exc
        metas: Sequence[Mapping[str, object] | None] = got.get("metadatas") or [None] * len(
            got["ids"]
        )
        return {i: _text_hash(m) for i, m in zip(got["ids"], metas, strict=True)}

    def delete_ids(self, ids: Sequence[str], batch: int = 2000) -> None:
        for i in range(0, len(ids), batch):
            try:
                self.collection.delete(ids=list(ids[i : i + batch]))
            except Exception as exc:
                raise VectorStoreError(f"Chroma delete failed: {exc}") from exc

    def upsert(
        self,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        metadatas: Sequence[dict[str, Any]],
        batch: int = 1000,
    ) -> None:
        for i in range(0, len(ids), batch):
            try:
                self.collection.upsert(
                    ids=list(ids[i : i + batch]),
                    embeddings=np.asarray(vectors[i : i + batch], dtype=np.float32),
                    metadatas=list(metadatas[i : i + batch]),
                )
            except Exception as exc:
                raise VectorStoreError(f"Chroma upsert failed: {exc}") from exc

    def query(self, vector: Sequence[float], release: str, n: int = 50) -> list[tuple[str, float]]:
        """(chunk id, cosine distance) of the nearest chunks of ``release``."""
        try:
            res = self.collection.query(
                query_embeddings=np.asarray([vector], dtype=np.float32),
                n_results=n,
                where={"release": release},
                include=["distances"],
            )
        except Exception as exc:
            raise VectorStoreError(f"Chroma query failed: {exc}") from exc
        ids = res["ids"][0] if res["ids"] else []
        dists = (res.get("distances") or [[]])[0]
        prefix = f"{release}:"
        return [(i.removeprefix(prefix), float(d)) for i, d in zip(ids, dists, strict=False)]

    def count(self, release: str | None = None) -> int:
        if release is None:
            return self.collection.count()
        return len(self.collection.get(where={"release": release}, include=[])["ids"])

    def delete_release(self, release: str) -> None:
        self.collection.delete(where={"release": release})
