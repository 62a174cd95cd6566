"""Answer snapshots: the same code gives the same answers; a changed answer is named."""

from __future__ import annotations

import copy
import json

from evals.incidents import INCIDENTS_DIR, load_incidents
from evals.snapshot import compare, main, snapshot
from service.engine import Engine


def test_snapshots_of_the_same_code_are_identical(kb) -> None:
    incidents = load_incidents([INCIDENTS_DIR / "seed.jsonl"])
    first = snapshot(Engine(kb), incidents)
    assert set(first) == {i.id for i in incidents}
    assert all("answer" in v and "timings_ms" not in v["answer"] for v in first.values())
    assert compare(first, snapshot(Engine(kb), incidents)) == {}
    changed = copy.deepcopy(first)
    some = next(iter(changed))
    changed[some]["answer"]["summary"] = "something else"
    assert list(compare(first, changed)) == [some]
    assert "summary" in compare(first, changed)[some][0]


def test_cli_compares_with_an_earlier_snapshot(
    kb_settings,
    ingest_reports,
    tmp_path,
    capsys,
) -> None:
    seed = str(INCIDENTS_DIR / "seed.jsonl")
    before = tmp_path / "before.jsonl"
    args = ["--incidents", seed, "--kb", str(kb_settings.kb_path)]
    assert main(["--out", str(before), *args]) == 0
    assert main(["--out", str(tmp_path / "after.jsonl"), "--compare", str(before), *args]) == 0
    rows = [json.loads(line) for line in before.read_text().splitlines()]
    rows[0]["answer"]["summary"] = "edited"
    before.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--out", str(tmp_path / "again.jsonl"), "--compare", str(before), *args]) == 1
    assert rows[0]["incident"] in capsys.readouterr().out
