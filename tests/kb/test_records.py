"""Stored triages: saving encoded answers, and similar confirmed incidents."""

from __future__ import annotations

import json
from pathlib import Path

from kb.records import Records


def _result(path: str, function: str, release: str = "0.5.11") -> dict:
    return {
        "location": {"path": path, "function": function},
        "release": {"release": release},
        "summary": f"{function} refused",
    }


def test_similar_finds_confirmed_triages_of_the_same_function_newest_first(tmp_path: Path) -> None:
    records = Records(tmp_path / "records.sqlite")
    spec = ("sglang/srt/server_args.py", "ServerArgs._handle_speculative_decoding")
    for i in range(5):
        records.save(f"t{i}", {"options": {}}, _result(*spec, release=f"0.5.{i}"))
    records.save("other", {"options": {}}, _result("sglang/srt/server_args.py", "ServerArgs.check"))
    records.save("plain", {"options": {}}, json.dumps(_result(*spec)))  # stored as encoded text
    for tid in ("t0", "t1", "t3", "t4", "other"):
        assert records.confirm(tid, {"flags": {"--speculative-eagle-topk": "1"}, "id": tid}, "ok")

    got = records.similar(*spec, exclude="t4", limit=2)
    # unconfirmed (t2, plain), other functions and the excluded id are left out; ties in the
    # confirmation second resolve to the later confirmation
    assert [s["id"] for s in got] == ["t3", "t1"]
    assert got[0] == {
        "id": "t3",
        "release": "0.5.3",
        "summary": spec[1] + " refused",
        "confirmed_fix": {"flags": {"--speculative-eagle-topk": "1"}, "id": "t3"},
        "note": "ok",
        "confirmed_at": got[0]["confirmed_at"],
    }
    assert records.similar("sglang/x.py", "f") == []
    assert records.get("plain")["result"] == _result(*spec)


def test_similar_never_reads_unconfirmed_triages(tmp_path: Path) -> None:
    """Only confirmed triages are decoded: an unconfirmed record is never parsed, so the
    cost of a triage does not grow with the number of stored ones."""
    records = Records(tmp_path / "records.sqlite")
    records.save("good", {}, _result("a.py", "f"))
    records.confirm("good", {"flags": {}}, "")
    for i in range(50):  # json_extract would fail on these if the query scanned them
        records.save(f"junk{i}", {}, "not JSON at all")
    assert [s["id"] for s in records.similar("a.py", "f")] == ["good"]
