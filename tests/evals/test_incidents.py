"""The incident format and loader, and the shipped incident files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from evals.families import FAMILIES_FILE
from evals.incidents import (
    CATEGORIES,
    INCIDENTS_DIR,
    SHIPPED,
    Incident,
    IncidentError,
    dump_incidents,
    load_incidents,
    parse_incidents,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "incidents"


def _minimal(**over: object) -> dict:
    base = {
        "id": "x-1",
        "source": "test",
        "crash_log": "AssertionError\n",
        "expected": {"location": None},
        "category": "other",
    }
    return {**base, **over}


def test_shipped_files_load_with_unique_ids() -> None:
    incidents = load_incidents()
    ids = [i.id for i in incidents]
    assert len(ids) == len(set(ids))
    by_file = {p.name: load_incidents([p]) for p in sorted(INCIDENTS_DIR.glob("*.jsonl"))}
    assert len(by_file["seed.jsonl"]) == 2
    assert len(by_file["public.jsonl"]) == 5
    assert len(by_file["generated.jsonl"]) >= 60
    assert len(by_file["generated_more.jsonl"]) >= 60
    # every file in the folder is the default set's, or the start-up families' (scored apart)
    assert set(by_file) == set(SHIPPED) | {FAMILIES_FILE.name}
    assert all(i.family for i in by_file[FAMILIES_FILE.name])
    assert not {i.id for i in by_file[FAMILIES_FILE.name]} & set(ids)
    assert {i.category for i in incidents} <= set(CATEGORIES)


def test_seed_incidents_match_the_case() -> None:
    seed = {i.id: i for i in load_incidents([INCIDENTS_DIR / "seed.jsonl"])}
    one, two = seed["seed-attempt-1"], seed["seed-attempt-2"]
    for inc in (one, two):
        loc = inc.expected.location
        assert inc.expected.release == "0.5.11"
        assert (loc.function, loc.start_line) == ("ServerArgs._handle_speculative_decoding", 3519)
        assert "--speculative-algorithm EAGLE3" in inc.crash_log
        assert inc.hardware == "rtx-pro-6000-x8" and inc.category == "speculative"
    assert 'server_args.py", line 3598, in _handle_speculative_decoding' in one.crash_log
    assert ".dev" in one.crash_log and "--speculative-eagle-topk 4" in one.crash_log
    assert 'server_args.py", line 3519, in _handle_speculative_decoding' in two.crash_log
    assert "--speculative-eagle-topk" not in two.crash_log
    assert set(one.expected.root_cause_flags) == {
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
    }
    assert two.expected.root_cause_flags == ["--speculative-num-draft-tokens"]
    triple = {
        "--speculative-num-steps": 3,
        "--speculative-eagle-topk": 1,
        "--speculative-num-draft-tokens": 4,
    }
    assert any(f.set == triple for f in one.expected.acceptable_fixes)
    assert any(
        f.remove == ["--speculative-num-draft-tokens"] and not f.set
        for f in two.expected.acceptable_fixes
    )


@pytest.mark.skipif(not (SHARED / "public_examples.jsonl").is_file(), reason="shared/ not present")
def test_public_incidents_keep_logs_and_reported_answers_verbatim() -> None:
    src = {
        json.loads(line)["id"]: json.loads(line)
        for line in (SHARED / "public_examples.jsonl").read_text().splitlines()
        if line.strip()
    }
    public = load_incidents([INCIDENTS_DIR / "public.jsonl"])
    assert len(public) == len(src) == 5
    for inc in public:
        orig = src[inc.id.removeprefix("public-")]
        assert inc.crash_log == orig["crash_log"]
        assert inc.expected.root_cause_flags == orig["root_cause_flags"]
        assert inc.source == orig["source_url"] and inc.release == orig["sglang_version"]
        assert inc.expected.release is None  # none of these releases is ingested
        assert inc.notes
    cats = Counter(i.category for i in public)
    assert cats["argparse"] == 1


def test_parse_errors_name_the_line() -> None:
    good = json.dumps(_minimal())
    with pytest.raises(IncidentError, match=":2:"):
        parse_incidents([good, json.dumps(_minimal(id="x-2", category="nonsense"))], "f.jsonl")
    with pytest.raises(IncidentError):
        parse_incidents([json.dumps(_minimal(unexpected=1))])
    with pytest.raises(IncidentError):
        parse_incidents([json.dumps(_minimal(crash_log="  "))])


def test_duplicate_ids_are_rejected(tmp_path) -> None:
    a = dump_incidents([Incident.model_validate(_minimal())], tmp_path / "a.jsonl")
    dump_incidents([Incident.model_validate(_minimal())], tmp_path / "b.jsonl")
    assert len(load_incidents([a])) == 1
    with pytest.raises(IncidentError, match="duplicate"):
        load_incidents([tmp_path])
    with pytest.raises(IncidentError, match="no such"):
        load_incidents([tmp_path / "missing.jsonl"])


def test_round_trip_and_command_forms(tmp_path) -> None:
    inc = Incident.model_validate(
        _minimal(command="python -m sglang.launch_server \\\n --tp 8 --model-path '/m/a b'")
    )
    assert inc.command_argv()[-2:] == ["--model-path", "/m/a b"]
    assert Incident.model_validate(_minimal(command=["--tp", "8"])).command_argv() == ["--tp", "8"]
    assert Incident.model_validate(_minimal()).command_argv() == []
    path = dump_incidents([inc], tmp_path / "x.jsonl")
    assert load_incidents([path]) == [inc]
