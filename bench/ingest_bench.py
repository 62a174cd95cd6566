"""Benchmark (a): ingest of one release, then the next one incrementally.

Measures, in one fresh KB: the structural index of release A, its default-scope
embedding, a raw sentence-transformers ``encode`` of the very same texts (the
reference for throughput), then release B on top (structure + only the vectors
it does not share with A). Full-scope embedding is measured on a fixed sample
of the whole package and extrapolated, and says so.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from sglang_triage.config import Settings
from sglang_triage.ingest.acquire import fetch_release
from sglang_triage.ingest.chunker import Chunk
from sglang_triage.ingest.pipeline import embed_release, in_scope, index_structure
from sglang_triage.kb.base import KnowledgeBase

TARGETS = {"structure_s": 20.0, "default_embed_s": 60.0, "next_release_ratio": 0.25,
           "embed_vs_raw": 0.9}


def _texts(kb: KnowledgeBase, version: str, scope: str) -> list[str]:
    rows = kb.store.query("SELECT path, qualname, kind, start_line, end_line, part, parts, text "
                          "FROM chunks WHERE release = ? ORDER BY path, start_line", (version,))
    seen: set[str] = set()
    out = []
    for r in rows:
        if not in_scope(r["path"], scope):
            continue
        c = Chunk(r["path"], r["qualname"], r["kind"], r["start_line"], r["end_line"], r["text"],
                  r["part"], r["parts"])
        if c.text_hash not in seen:
            seen.add(c.text_hash)
            out.append(c.embed_text)
    return out


def run(release_a: str, release_b: str, full_sample: int) -> dict:
    settings = Settings()
    src_a = fetch_release(release_a, wheel_dir=settings.wheel_dir, source_dir=settings.source_dir)
    src_b = fetch_release(release_b, wheel_dir=settings.wheel_dir, source_dir=settings.source_dir)
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase(settings.model_copy(update={"kb_dir": Path(tmp), "chroma_url": None}))
        kb.embedder.encode(["warm up"])  # model load is not ingest work
        t = time.perf_counter()
        rep_a = index_structure(kb, src_a)
        structure_a = time.perf_counter() - t
        t = time.perf_counter()
        embed_release(kb, release_a, "default", rep_a)
        embed_a = time.perf_counter() - t
        texts = _texts(kb, release_a, "default")
        t = time.perf_counter()
        kb.embedder.model.encode(texts, batch_size=kb.embedder.batch_size, normalize_embeddings=True)
        raw = time.perf_counter() - t
        t = time.perf_counter()
        rep_b = index_structure(kb, src_b)
        embed_release(kb, release_b, "default", rep_b)
        next_b = time.perf_counter() - t
        all_texts = _texts(kb, release_a, "full")
        sample = random.Random(0).sample(all_texts, min(full_sample, len(all_texts)))
        t = time.perf_counter()
        kb.embedder.encode(sample)
        sample_s = time.perf_counter() - t
        kb.close()
    cold = structure_a + embed_a
    result = {
        "release_a": release_a, "release_b": release_b,
        "structure_s": round(structure_a, 2), "files": rep_a.files, "chunks": rep_a.chunks,
        "checks": rep_a.checks, "default_embed_s": round(embed_a, 2),
        "default_chunks": rep_a.embedded + rep_a.reused,
        "embed_chunks_per_s": round(len(texts) / embed_a, 2) if embed_a else None,
        "raw_encode_chunks_per_s": round(len(texts) / raw, 2) if raw else None,
        "embed_vs_raw": round(raw / embed_a, 3) if embed_a else None,
        "next_release_s": round(next_b, 2), "next_release_ratio": round(next_b / cold, 3),
        "next_release_embedded": rep_b.embedded, "next_release_reused": rep_b.reused,
        "full_scope_chunks": len(all_texts),
        "full_scope_embed_s_extrapolated": round(sample_s / len(sample) * len(all_texts), 1),
        "full_scope_sample": len(sample),
        "targets": TARGETS,
    }
    result["met"] = {
        "structure_s": result["structure_s"] <= TARGETS["structure_s"],
        "default_embed_s": result["default_embed_s"] <= TARGETS["default_embed_s"],
        "next_release_ratio": result["next_release_ratio"] <= TARGETS["next_release_ratio"],
        "embed_vs_raw": (result["embed_vs_raw"] or 0) >= TARGETS["embed_vs_raw"],
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release-a", default="0.5.11")
    ap.add_argument("--release-b", default="0.5.12")
    ap.add_argument("--full-sample", type=int, default=512)
    ap.add_argument("--out", default="bench/results/ingest.json")
    args = ap.parse_args()
    result = run(args.release_a, args.release_b, args.full_sample)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
