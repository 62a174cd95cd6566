"""``sglang-triage eval``'s per-incident table stays readable at 80 columns (no KB needed)."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console

import evals.cli as cli
from evals.scoring import METRICS
from evals.summary import (
    NOT_INGESTED,
    EvalReport,
    IncidentScore,
    SystemReport,
    _groups,
    aggregate,
    release_order,
)


def _report(metrics: tuple[str, ...]) -> EvalReport:
    scores = [
        IncidentScore(
            id=f"gen-{release.replace(' ', '_')}-ServerArgs._handle_speculative_decoding-assert-{3519 + i}-{'x' * 30}",
            category="speculative",
            source="generated",
            expected_release=release,
            status="located",
            error="RuntimeError: boom" if i == 2 else None,
            latency_ms=123_456.0 + i,
            metrics={m: [True, False, 0.5, None][(i + j) % 4] for j, m in enumerate(metrics)},
        )
        for i, release in enumerate(["0.5.11", "0.5.23", NOT_INGESTED, "0.5.5"])
    ]
    system = SystemReport(
        name="engine",
        incidents=scores,
        aggregate=aggregate(scores),
        by_category=_groups(scores, lambda s: s.category),
        by_release=_groups(scores, lambda s: s.expected_release, release_order),
    )
    return EvalReport(
        created="now", target="in-process", incidents=len(scores), systems={"engine": system}
    )


def _lines(report: EvalReport) -> list[str]:
    buf = StringIO()
    Console(file=buf, width=80, no_color=True).print(cli.incident_table(report))
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("extra", [(), ("replay_verdict_seen", "features_kept_share")])
def test_every_line_of_the_per_incident_table_fits_80_columns(
    monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...]
) -> None:
    metrics = METRICS + extra
    monkeypatch.setattr(cli, "METRICS", metrics)  # a metric added later still fits
    report = _report(metrics)
    lines = _lines(report)
    assert max(len(line) for line in lines) <= 80
    head = next(line for line in lines if line.startswith("incident"))
    assert head.split()[2:] == [cli._short(m) for m in metrics if m not in cli.AGGREGATE_ONLY]
    assert all(len(h) <= 3 for h in head.split()[2:])
    width = head.index("release")
    column = "".join(line[:width].strip() for line in lines[lines.index(head) + 2 :])
    assert all(s.id in column for s in report.engine.incidents)  # ids fold, never cut
