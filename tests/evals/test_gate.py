"""The gate's rules, overall and per release, on synthetic reports (no KB needed)."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from evals.cli import AGGREGATE_ONLY, _short, print_report
from evals.gate import applies, check_gate, release_advisories
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

TH = {
    "system": "engine",
    "min": {"exact_location": 0.95},
    "max": {"errors": 0},
    "per_release": {"min_n": 10},
}


def _score(i: int, release: str, hit: bool, error: bool = False) -> IncidentScore:
    metrics: dict[str, bool | float | None] = {m: None for m in METRICS}
    metrics["exact_location"] = hit
    return IncidentScore(
        id=f"gen-{release.replace(' ', '_')}-check_something_long_enough-{1000 + i}",
        category="speculative",
        source="generated",
        expected_release=release,
        status="located",
        error="RuntimeError: x" if error else None,
        latency_ms=100.0 + i,
        metrics=metrics,
    )


def _report(scores: list[IncidentScore]) -> EvalReport:
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


def _release(name: str, n: int, misses: int, start: int = 0) -> list[IncidentScore]:
    return [_score(start + i, name, hit=i >= misses) for i in range(n)]


def test_applies_only_where_one_miss_alone_cannot_break_the_floor() -> None:
    assert not applies("m", 0.95, 19, 10, floor=True)  # 18/19 < 0.95: one miss decides
    assert applies("m", 0.95, 20, 10, floor=True)  # 19/20 == 0.95
    assert not applies("m", 0.97, 33, 10, floor=True)
    assert applies("m", 0.97, 34, 10, floor=True)
    assert applies("m", 1.0, 10, 10, floor=True) and not applies("m", 1.0, 9, 10, floor=True)
    assert applies("errors", 0, 10, 10, floor=False)
    assert not applies("errors", 0, 0, 0, floor=False)


def test_a_release_cannot_hide_behind_the_average() -> None:
    # 0.5.5 scores 16/20 = 0.80 while the whole set scores 96/100 = 0.96 >= 0.95
    scores = _release("0.5.9", 80, 0) + _release("0.5.5", 20, 4, start=100)
    report = _report(scores)
    assert report.engine.aggregate["exact_location"] == 0.96
    assert list(report.engine.by_release) == ["0.5.5", "0.5.9"]  # numeric order
    assert check_gate(report, TH) == ["engine[0.5.5].exact_location: 0.8 < 0.95 (n=20)"]


def test_small_releases_are_reported_not_gated() -> None:
    scores = (
        _release("0.5.11", 60, 0)
        + _release("0.5.21", 12, 1, start=100)
        + [_score(200, NOT_INGESTED, hit=False)]
    )
    report = _report(scores)
    assert check_gate(report, TH) == []  # 11/12 = 0.917 but 12 < 20
    assert release_advisories(report, TH) == [
        "engine[0.5.21].exact_location: 0.9167 < 0.95 (n=12), not gated: too few incidents"
    ]
    assert list(report.engine.by_release)[-1] == NOT_INGESTED  # reported, never gated


def test_errors_are_gated_per_release_too() -> None:
    scores = _release("0.5.9", 30, 0) + [
        _score(100 + i, "0.5.16", True, error=i == 0) for i in range(12)
    ]
    failures = check_gate(_report(scores), TH)
    assert "engine.errors: 1 > 0" in failures
    assert "engine[0.5.16].errors: 1 > 0 (n=12)" in failures


def test_printed_tables_fit_80_columns() -> None:
    scores = (
        _release("0.5.21", 3, 1)
        + _release("0.5.16", 2, 0, start=10)
        + [_score(99, NOT_INGESTED, hit=True, error=True)]
    )
    buf = StringIO()
    print_report(_report(scores), Console(file=buf, width=80, no_color=True))
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.startswith("0.5.21 ") for line in lines)  # the by-release table
    head = next(line for line in lines if line.startswith("incident"))
    assert head.split()[1:] == ["release", *(_short(m) for m in METRICS if m not in AGGREGATE_ONLY)]
    # ids fold instead of being cut: the incident column, read down, holds every id
    width = head.index("release")
    body = lines[lines.index(head) + 2 :]
    body = body[: next(i for i, line in enumerate(body) if line.startswith("rel release@1"))]
    column = "".join(line[:width].strip() for line in body)
    assert all(s.id in column for s in scores) and column.count("check_something") == 6
