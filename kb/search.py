"""Hybrid search over one release: FTS5/BM25 keywords fused with dense vectors.

Both rankings are computed over the chunks of a single release and fused by
reciprocal rank (RRF, k=60). Keywords alone still answer when the release has
no vectors yet or Chroma is unreachable; the result then says ``degraded``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kb.errors import ConfigError, VectorStoreError
from kb.knowledge import KnowledgeBase

RRF_K = 60


@dataclass
class Hit:
    release: str
    path: str
    qualname: str
    kind: str
    start_line: int
    end_line: int
    text: str
    score: float
    ranks: dict[str, int] = field(default_factory=dict)

    @property
    def citation(self) -> str:
        return f"{self.release}:{self.path}:{self.start_line}-{self.end_line}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "citation": self.citation}


@dataclass
class SearchResult:
    query: str
    release: str
    hits: list[Hit]
    modes: list[str]  # "keyword", "dense"
    degraded: str | None = None  # why dense search was skipped, if it was

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "release": self.release,
            "modes": self.modes,
            "degraded": self.degraded,
            "hits": [h.as_dict() for h in self.hits],
        }


def hybrid_search(
    kb: KnowledgeBase, query: str, release: str, *, k: int = 10, dense: bool = True, pool: int = 50
) -> SearchResult:
    """Top ``k`` chunks of ``release`` for ``query``."""
    rel = kb.store.require(release)
    rankings: dict[str, list[str]] = {
        "keyword": [cid for cid, _ in kb.store.fts(query, release, pool)]
    }
    degraded: str | None = None
    if dense:
        if (rel.get("embedded_scope") or "none") == "none":
            degraded = f"release {release} has no embeddings (ingested with --scope none)"
        else:
            try:
                vec = kb.query_embedder.encode([query])[0]
                rankings["dense"] = [cid for cid, _ in kb.vectors.query(vec, release, pool)]
            except VectorStoreError as exc:
                degraded = f"vector store unavailable: {exc.message}"
            except ConfigError as exc:  # no embedding model in this install (the [ingest] extra)
                degraded = f"query embedding unavailable: {exc.message}"
            except ImportError as exc:  # a non-BERT model without sentence-transformers
                degraded = (
                    f"query embedding unavailable: {exc.name} is not installed (the [ingest] extra)"
                )
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for mode, ids in rankings.items():
        for rank, cid in enumerate(ids, start=1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (RRF_K + rank)
            ranks.setdefault(cid, {})[mode] = rank
    top = sorted(scores, key=lambda c: -scores[c])[:k]
    hits = [
        Hit(
            release,
            r["path"],
            r["qualname"],
            r["kind"],
            r["start_line"],
            r["end_line"],
            r["text"],
            round(scores[r["id"]], 6),
            ranks[r["id"]],
        )
        for r in kb.store.chunks(release, top)
    ]
    return SearchResult(query, release, hits, list(rankings), degraded)
