"""The answer's typed stage values (:mod:`service.engine.answer`): a key a step did not
write stays out of the JSON, and a stored answer reads back to the same JSON."""

from __future__ import annotations

import json

from service.engine import (
    FixSearch,
    LLMInfo,
    OnDemandNote,
    ReleaseInfo,
    SimilarTriage,
    TriageResult,
)
from service.engine.release.resolve import ReleaseResolution

RESOLVED = {
    "release": "0.5.11",
    "confidence": 1.0,
    "method": "explicit",
    "dev_build": False,
    "reported_version": None,
    "note": None,
    "evidence": ["release given: 0.5.11"],
    "candidates": [],
    "line_offsets": {},
    "range": None,
}


def _answer(**parts: object) -> TriageResult:
    return TriageResult(
        status="unlocated",
        summary="s",
        explanation="",
        confidence=0.0,
        release=RESOLVED,
        parsed={},
        **parts,  # type: ignore[arg-type]
    )


def test_the_release_holds_every_field_of_the_resolution() -> None:
    """The engine's resolution is the release's first part: a field added there must be
    added to :class:`ReleaseInfo` too, or the answer would drop it silently."""
    fields = list(ReleaseResolution.model_fields)
    assert fields == list(ReleaseInfo.model_fields)[: len(fields)]
    dumped = ReleaseResolution(**RESOLVED).model_dump()  # type: ignore[arg-type]
    assert ReleaseInfo.model_validate(dumped).model_dump() == dumped


def test_keys_no_step_wrote_are_absent_and_written_ones_follow_in_order() -> None:
    answer = _answer()
    assert json.loads(answer.model_dump_json())["release"] == RESOLVED
    answer.release.source = "installed"
    answer.release.match = "exact"
    body = json.loads(answer.model_dump_json())["release"]
    assert list(body) == [*RESOLVED, "source", "match"]
    assert "on_demand" not in body and "installed" not in body


def test_fix_search_llm_and_similar_keep_their_keys() -> None:
    skipped = FixSearch(status="skipped", detail="no sandbox", candidates=0)
    assert skipped.model_dump() == {"status": "skipped", "candidates": 0, "detail": "no sandbox"}
    done = FixSearch(
        status="verified",
        candidates=2,
        detail="d",
        seconds=1.5,
        release="0.5.11",
        hardware=None,
        not_replayed=0,
    )
    assert done.model_dump(mode="json")["hardware"] is None  # written as null, not left out
    info = LLMInfo(used=False, model="m", method="json_schema", error="e")
    assert info.model_dump() == {"used": False, "model": "m", "method": "json_schema", "error": "e"}
    entry = {
        "release": "0.5.11",
        "summary": "s",
        "confirmed_fix": {},
        "note": "",
        "confirmed_at": "t",
    }
    assert SimilarTriage.model_validate(entry).model_dump() == entry  # no id: not the caller's


def test_a_stored_answer_reads_back_to_the_same_json() -> None:
    answer = _answer(
        fix_search={"status": "skipped", "candidates": 0, "detail": "why"},
        similar=[{"id": "t1", "release": "0.5.11", "summary": None, "confirmed_fix": None,
                  "note": "", "confirmed_at": None}],
    )  # fmt: skip
    answer.release.on_demand = OnDemandNote(
        release="0.5.12", status="unavailable", detail="d", how="h"
    )
    answer = TriageResult.model_validate_json(answer.model_dump_json())
    again = TriageResult.model_validate_json(answer.model_dump_json())
    assert again.model_dump_json() == answer.model_dump_json()
    assert again.release.on_demand == answer.release.on_demand


def test_an_answer_stored_with_a_shorter_release_still_loads() -> None:
    """Answers stored before the release had a model carry only some of its keys: they
    read back, the keys they lack at their empty values, the keys they have unchanged."""
    old = {"release": "0.5.9", "method": "explicit", "evidence": ["release given: 0.5.9"]}
    answer = TriageResult.model_validate(
        {
            "status": "unlocated",
            "summary": "s",
            "explanation": "",
            "confidence": 0.0,
            "release": old,
            "parsed": {},
        }
    )
    assert answer.release.release == "0.5.9" and answer.release.method == "explicit"
    assert answer.release.evidence == ["release given: 0.5.9"]
    assert answer.release.dev_build is False and answer.release.note is None
