"""The knowledge base as one object: structured index + vectors + embedder.

``KnowledgeBase(settings)`` opens ``<kb>/index.sqlite`` at once and Chroma and
the embedding model lazily, on first use (queries are embedded by
:attr:`KnowledgeBase.query_embedder`, without torch), so a process that only reads the
structured index (most of triage) never pays for them. When Chroma is down,
:attr:`vectors_ok` turns False and callers fall back to keyword search.
"""

from __future__ import annotations

import logging
import threading
from functools import cached_property
from pathlib import Path

from kb.embedder import Embedder, get_embedder
from kb.errors import ConfigError, VectorStoreError
from kb.query_encoder import NumpyBertEncoder, get_query_encoder
from kb.settings import KBSettings
from kb.store import Store
from kb.vectors import VectorStore

log = logging.getLogger("sglang_triage.kb")


class KnowledgeBase:
    """Everything the engine reads, for one KB folder."""

    def __init__(self, settings: KBSettings) -> None:
        self.settings = settings
        self.root: Path = settings.kb_path
        self.root.mkdir(parents=True, exist_ok=True)
        self.store = Store(self.root / "index.sqlite")
        self._vectors: VectorStore | None = None
        self._lock = threading.Lock()

    @property
    def vectors(self) -> VectorStore:
        """The Chroma collection (embedded in ``<kb>/chroma`` or the configured server)."""
        with self._lock:
            if self._vectors is None:
                self._vectors = VectorStore(
                    path=None if self.settings.chroma_url else self.root / "chroma",
                    url=self.settings.chroma_url,
                )
            return self._vectors

    def vectors_ok(self) -> bool:
        try:
            return self.vectors.heartbeat()
        except VectorStoreError:
            return False

    @cached_property
    def embedder(self) -> Embedder:
        return get_embedder(
            self.settings.resolved_embedding_model(), batch_size=self.settings.embedding_batch_size
        )

    @cached_property
    def query_embedder(self) -> Embedder | NumpyBertEncoder:
        """What embeds search queries: by default the embedding model run in NumPy
        (:mod:`kb.query_encoder`; same vectors, no torch in the process), or
        :attr:`embedder` when configured so or when the model is no BERT encoder."""
        if self.settings.query_encoder == "numpy":
            try:
                return get_query_encoder(self.settings.resolved_embedding_model())
            except ConfigError as exc:
                log.info("query encoder: sentence-transformers (%s)", exc.message)
        return self.embedder

    def reset_vectors(self) -> None:
        """Forget the Chroma client (after a server restart, say)."""
        with self._lock:
            self._vectors = None

    def close(self) -> None:
        self.store.close()
