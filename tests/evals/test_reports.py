"""The markdown report lists an incident among the engine's misses by what it missed."""

from __future__ import annotations

from evals.reports import markdown
from evals.scoring import missed
from evals.summary import EvalReport, IncidentScore, SystemReport


def _score(ident: str, **metrics: bool | float | None) -> IncidentScore:
    return IncidentScore(
        id=ident,
        category="parallelism",
        source="generated",
        status="located",
        location="sglang/srt/server_args.py:10-12",
        latency_ms=1.0,
        metrics=metrics,
    )


def test_a_share_of_bad_outcomes_is_missed_when_true() -> None:
    assert not missed("no_fix", False) and missed("no_fix", True)
    assert missed("no_fix", 0.5) and not missed("no_fix", 0.0)
    assert missed("fix_valid", False) and not missed("fix_valid", True)
    assert missed("rc_recall", 0.5) and not missed("rc_recall", None)


def test_misses_table_lists_what_each_incident_missed() -> None:
    fine = _score("fine", fix_valid=True, no_fix=False, rc_recall=1.0)
    no_fix = _score("no-fix", fix_valid=True, no_fix=True, rc_recall=1.0)
    partial = _score("partial", fix_valid=False, no_fix=False, rc_recall=0.5)
    system = SystemReport(
        name="engine",
        incidents=[fine, no_fix, partial],
        aggregate={"n": 3, "errors": 0},
        by_category={},
    )
    md = markdown(EvalReport(created="now", target="t", incidents=3, systems={"engine": system}))
    table = md.split("## Engine misses", 1)[1]
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if "|" in line}
    assert "fine" not in rows
    assert rows["no-fix"].endswith("| no fix (share) |")
    assert rows["partial"].endswith("| fix valid, root-cause R |")  # in the metrics' order
