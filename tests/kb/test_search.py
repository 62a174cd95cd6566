"""Hybrid search over an ingested release."""

from __future__ import annotations

from kb.knowledge import KnowledgeBase
from kb.search import hybrid_search
from kb.store import fts_query


def _holds(hit, text: str) -> bool:
    return text in hit.text


def test_search_finds_the_trtllm_topk_raise(kb: KnowledgeBase) -> None:
    result = hybrid_search(kb, "topk must be 1 for trtllm", "0.5.11", k=5)
    assert result.modes == ["keyword", "dense"] and result.degraded is None
    raise_line = next(
        c
        for c in kb.store.checks("0.5.11", path="sglang/srt/server_args.py")
        if "trtllm_mha backend only supports topk = 1" in (c.message or "")
    )
    hits = [
        h
        for h in result.hits
        if h.path == raise_line.path and h.start_line <= raise_line.start_line <= h.end_line
    ]
    assert hits, [h.citation for h in result.hits]
    assert hits[0].release == "0.5.11" and hits[0].qualname.startswith("ServerArgs.")


def test_keyword_search_still_answers_without_vectors(kb: KnowledgeBase) -> None:
    result = hybrid_search(kb, "speculative_eagle_topk", "0.5.9", k=3)
    assert result.modes == ["keyword"]
    assert result.degraded and "no embeddings" in result.degraded
    assert result.hits and all(h.release == "0.5.9" for h in result.hits)
    assert any("speculative_eagle_topk" in h.text for h in result.hits)


def test_fts_query_is_safe_and_splits_identifiers() -> None:
    q = fts_query('--speculative-eagle-topk "AND" NEAR(')
    assert '"speculative"' in q and '"topk"' in q
    assert fts_query("!!!") == ""
