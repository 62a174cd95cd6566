"""The grep and naive-RAG baselines."""

from __future__ import annotations

import pytest

from evals.baselines import RagBaseline, baseline_release, grep_baseline
from evals.incidents import INCIDENTS_DIR, load_incidents
from evals.scoring import score


@pytest.fixture(scope="module")
def seed() -> dict:
    return {i.id: i for i in load_incidents([INCIDENTS_DIR / "seed.jsonl"])}


def test_grep_finds_the_seed_assert_on_release_lines(kb, seed) -> None:
    pred = grep_baseline(kb.store, seed["seed-attempt-2"])
    assert pred.location["start_line"] == 3519 and pred.location["end_line"] == 3522
    assert "--speculative-num-draft-tokens" in pred.root_cause
    assert pred.fixes and pred.fixes[0]["remove"] == pred.root_cause
    m = score(seed["seed-attempt-2"], pred, kb.store)
    assert m["exact_location"] is True and m["release_at_1"] is None and m["fix_valid"] is None
    assert m["rc_recall"] == 1.0


def test_grep_is_misled_by_the_dev_build_offset(kb, seed) -> None:
    """Line 3598 of the dev build is not the assert in 0.5.11: the article's discrepancy."""
    pred = grep_baseline(kb.store, seed["seed-attempt-1"])
    m = score(seed["seed-attempt-1"], pred, kb.store)
    assert m["exact_location"] is False


def test_grep_without_frames_locates_nothing(kb) -> None:
    inc = next(i for i in load_incidents() if i.id == "public-sglang-36840")
    pred = grep_baseline(kb.store, inc)
    assert pred.location is None and pred.status == "unlocated"
    assert baseline_release(kb.store, inc, None) == "0.5.23"  # nothing named: the newest


def test_rag_chunks_the_validation_files_and_retrieves(kb) -> None:
    rag = RagBaseline(kb)
    chunks = rag.chunks("0.5.11")
    assert chunks and {c["path"] for c in chunks} == {"sglang/srt/server_args.py"}
    assert all(c["start_line"] <= c["end_line"] for c in chunks)
    text = kb.store.file_text("0.5.11", "sglang/srt/server_args.py").split("\n")
    c = chunks[len(chunks) // 2]
    assert text[c["start_line"] - 1].strip() in c["text"]
    inc = next(
        i
        for i in load_incidents()
        if i.release == "0.5.11" and "ValueError:" in i.crash_log and "Traceback" not in i.crash_log
    )
    pred = rag.predict(inc)
    assert pred.release == "0.5.11" and pred.extra["top"]
    if pred.location is not None:
        assert kb.store.checks(
            "0.5.11",
            path=pred.location["path"],
            where="start_line = ?",
            params=[pred.location["start_line"]],
        )
    m = score(inc, pred, kb.store)
    assert m["fix_match"] is None and m["release_at_1"] is None
    _, matrix = rag.index("0.5.11")
    assert matrix.shape == (len(chunks), kb.embedder.dim)
