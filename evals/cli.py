"""``sglang-triage eval`` and ``sglang-triage export-incidents``: the eval suite's commands.

:func:`eval_command` prints the per-incident table and the aggregate metrics
with rich, writes ``report.json``, ``report.md`` and ``metrics_by_category.png``
to ``out`` and returns the exit code (1 when the CI gate fails and ``gate`` is
set, 2 on bad input, else 0). :func:`register` adds both commands to the
service's CLI; it is the ``sglang_triage.commands`` entry point, so the service
never imports the eval suite.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from evals.gate import (
    FAMILY_THRESHOLDS,
    THRESHOLDS,
    check_gate,
    load_thresholds,
    release_advisories,
)
from evals.incidents import IncidentError, dump_incidents, load_incidents
from evals.reports import LABELS, write_reports
from evals.runner import run_eval
from evals.scoring import METRICS
from evals.summary import NOT_INGESTED, EvalReport
from service.settings import Settings, reveal

#: three-letter column heads of the per-incident and per-release tables (80 columns)
_SHORT = {
    "release_at_1": "rel",
    "exact_location": "loc",
    "function_match": "fn",
    "rc_precision": "rcP",
    "rc_recall": "rcR",
    "fix_valid": "vld",
    "fix_match": "fix",
    "no_fix_declined": "dcl",
    "grounded": "gnd",
    "fix_replay": "rpl",
    "no_fix": "nof",
    "keeps_features": "kep",
    "keeps_all_features": "kal",
    "upgrade_said": "upg",
    "not_flag_said": "nfp",
}


def _short(metric: str) -> str:
    """A metric's column head: its three-letter name, else its first three letters (a
    metric added without one still gets a narrow column)."""
    return _SHORT.get(metric, metric[:3])


_LEGEND = " · ".join(f"{_short(m)} {LABELS.get(m, m)}" for m in METRICS)


def _cell(value: object) -> str:
    """One incident's metric in at most three characters."""
    if value is None:
        return "[dim]·[/dim]"
    v = float(value)  # type: ignore[arg-type]
    if v >= 0.999:
        return "[green]✓[/green]"
    if v <= 0.0:
        return "[red]✗[/red]"
    return f"[yellow]{v:.2f}".replace("0.", ".", 1) + "[/yellow]"


def _mean(value: object) -> str:
    """A mean in at most four characters: ``1``, ``.958``, ``0``, ``–``."""
    if value is None:
        return "–"
    v = float(value)  # type: ignore[arg-type]
    return "1" if v >= 0.9995 else ("0" if v <= 0.0 else f"{v:.3f}"[1:])


def _compact(title: str) -> Table:
    """A table whose columns are one space apart (no padding, no edges)."""
    return Table(
        title=title,
        box=box.SIMPLE_HEAD,
        padding=(0, 0),
        pad_edge=False,
        show_edge=False,
        title_justify="left",
    )


#: metrics shown per release but not per incident: another reading of a metric that the
#: incident table already marks (``keeps_all_features`` beside ``keeps_features``)
AGGREGATE_ONLY = frozenset({"keeps_all_features"})


def incident_table(report: EvalReport) -> Table:
    """The engine's per-incident scores: id, expected release, one mark per metric but
    :data:`AGGREGATE_ONLY` (fits 80 columns with up to 16 metrics: long ids fold onto a
    second line; each incident's latency is in the JSON report, percentiles in the release
    table)."""
    eng = report.engine
    shown = [m for m in METRICS if m not in AGGREGATE_ONLY]
    table = _compact(f"engine on {report.incidents} incidents ({report.target})")
    table.add_column("incident", overflow="fold", ratio=1)
    table.add_column("release", no_wrap=True)
    for m in shown:
        table.add_column(_short(m), justify="center", no_wrap=True)
    for s in eng.incidents:
        release = "–" if s.expected_release == NOT_INGESTED else s.expected_release
        ident = f"[red]{s.id}[/red]" if s.error else s.id
        table.add_row(ident, release, *(_cell(s.metrics.get(m)) for m in shown))
    return table


def release_table(report: EvalReport) -> Table:
    """The engine's aggregate per release (``expected.release``): n, each metric, p95."""
    table = _compact("engine by release (mean over incidents where a metric applies)")
    table.add_column("release", no_wrap=True)
    table.add_column("n", justify="right")
    for m in METRICS:
        table.add_column(_short(m), justify="right", no_wrap=True, min_width=4)
    table.add_column("p95 s", justify="right", no_wrap=True)
    for release, agg in report.engine.by_release.items():
        p95 = agg.get("latency_p95_ms")
        table.add_row(
            release,
            str(agg["n"]),
            *(_mean(agg.get(m)) for m in METRICS),
            "–" if p95 is None else f"{float(p95) / 1000:.1f}",
        )
    return table


def print_report(report: EvalReport, console: Console) -> None:
    console.print(incident_table(report))
    console.print(f"[dim]{_LEGEND}[/dim]")
    errors = [s for s in report.engine.incidents if s.error]
    for s in errors:
        console.print(f"[red]error[/red] {s.id}: {s.error}", overflow="fold")
    console.print()
    console.print(release_table(report))
    agg = _compact("aggregate (mean over incidents where a metric applies)")
    agg.add_column("metric")
    for name in report.systems:
        agg.add_column(name, justify="right")
    for m in METRICS:
        agg.add_row(
            LABELS[m],
            *(
                f"{a[m]:.3f} (n={a[f'{m}_n']})" if a.get(m) is not None else "–"
                for a in (s.aggregate for s in report.systems.values())
            ),
        )
    for key in ("latency_p50_ms", "latency_p95_ms", "errors"):
        agg.add_row(key, *(str(s.aggregate.get(key)) for s in report.systems.values()))
    console.print()
    console.print(agg)


def variant_table(report: EvalReport) -> Table:
    """Per variant (``original`` first): n, location right, fix right (and on what basis)."""
    table = _compact("engine by variant (location right · fix right: replay, else static)")
    for col in ("variant", "n", "loc ok", "n loc", "fix ok", "n fix", "errors"):
        table.add_column(col, justify="left" if col == "variant" else "right", no_wrap=True)
    for name, agg in report.by_variant.items():
        table.add_row(
            name,
            str(agg["n"]),
            _mean(agg.get("location_ok")),
            str(agg.get("location_ok_n", 0)),
            _mean(agg.get("fix_ok")),
            str(agg.get("fix_ok_n", 0)),
            str(agg.get("errors", 0)),
        )
    return table


def reliability_table(report: EvalReport) -> Table:
    """Answers by stated confidence against location right (originals and variants)."""
    table = _compact("reliability: stated confidence vs location right")
    for col in ("confidence", "n", "right", "share"):
        table.add_column(col, justify="left" if col == "confidence" else "right", no_wrap=True)
    for row in report.reliability:
        table.add_row(row["bucket"], str(row["n"]), str(row["correct"]), _mean(row["share"]))
    return table


def family_table(report: EvalReport) -> Table:
    """Per start-up check family and variant: n, exact location, location right, fix right."""
    table = _compact("engine by check family (fix right: replay, else static)")
    for col in ("family", "variant", "n", "exact", "loc ok", "fix ok", "n fix"):
        table.add_column(
            col, justify="left" if col in ("family", "variant") else "right", no_wrap=True
        )
    for family, agg in report.engine.by_family.items():
        rows = report.by_family_variant.get(family) or {"original": agg}
        for variant, v in rows.items():
            table.add_row(
                family,
                variant,
                str(v["n"]),
                _mean(v.get("exact_location")),
                _mean(v.get("location_ok")),
                _mean(v.get("fix_ok")),
                str(v.get("fix_ok_n", 0)),
            )
    return table


def print_variants(report: EvalReport, console: Console) -> None:
    """The by-variant table and the reliability table (when variants were run)."""
    if not report.by_variant:
        return
    console.print()
    console.print(variant_table(report))
    console.print()
    console.print(reliability_table(report))


def eval_command(
    incidents: list[str] | None,
    against: str | None,
    out: str,
    baselines: bool,
    *,
    gate: bool = False,
    settings: Settings | None = None,
    console: Console | None = None,
    replay: bool = False,
    variants: str | None = None,
    thresholds: str | None = None,
) -> int:
    """Run the eval over ``incidents`` (files/folders; the shipped ones when None);
    ``replay`` (in-process only, when the OS sandbox is there) adds the replay-backed fix
    search and replay's verdict on each recommended fix. ``variants`` (``all`` or a comma
    list of :data:`evals.variants.VARIANTS`) also answers those variants of each generated
    incident and prints the by-variant and reliability tables. ``thresholds`` is the gate's
    file: by default ``thresholds_families.json`` when every incident has a start-up check
    family (:mod:`evals.families`), else ``thresholds.json``."""
    from evals.variants import parse_variants
    from kb.knowledge import KnowledgeBase

    console = console or Console()
    try:
        names = parse_variants(variants)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    try:
        items = load_incidents(incidents or None)
    except IncidentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    settings = settings or Settings()
    kb = KnowledgeBase(settings)
    has_kb = bool(kb.store.releases())
    if against is None and not has_kb:
        console.print(
            "[red]error:[/red] the KB holds no releases; run "
            "`sglang-triage ingest --defaults` or pass --against URL"
        )
        return 2
    if baselines and not has_kb:
        console.print("[yellow]baselines need a local KB; skipped[/yellow]")
        baselines = False
    if against is None:
        from service.engine import Engine

        target: object = Engine(kb)
    else:
        target = against
    with console.status(f"evaluating {len(items)} incidents…"):
        report = run_eval(
            items,
            target,
            kb=kb if has_kb else None,
            baselines=baselines,
            replay=settings if replay and against is None else None,
            variants=names,
        )
    print_report(report, console)
    print_variants(report, console)
    if report.engine.by_family:
        console.print()
        console.print(family_table(report))
    paths = write_reports(report, out)
    console.print("reports: " + ", ".join(str(p) for p in paths.values()))
    families = bool(items) and all(i.family for i in items)
    th = load_thresholds(thresholds or (FAMILY_THRESHOLDS if families else THRESHOLDS))
    failures = check_gate(report, th)
    for line in failures:
        console.print(f"[yellow]gate:[/yellow] {line}")
    if not failures:
        console.print("[green]gate holds[/green] (overall and per release)")
    for line in release_advisories(report, th):
        console.print(f"[dim]advisory: {line}[/dim]")
    return 1 if gate and failures else 0


def _eval(
    incidents: Annotated[
        list[str] | None, typer.Option("--incidents", help="JSONL files or folders.")
    ] = None,
    against: Annotated[
        str | None, typer.Option(help="URL of a running service (else in-process).")
    ] = None,
    out: Annotated[
        str, typer.Option(help="Folder for the JSON, markdown and PNG reports.")
    ] = "evals/reports",
    baselines: Annotated[
        bool, typer.Option(help="Score the grep and naive-RAG baselines too.")
    ] = True,
    gate: Annotated[
        bool, typer.Option(help="Exit 1 when a metric is below the checked-in thresholds.")
    ] = False,
    replay: Annotated[
        bool,
        typer.Option(
            help="In-process: run the replay-backed fix search and replay each recommended fix (fix passes replay)."
        ),
    ] = True,
    variants: Annotated[
        str | None,
        typer.Option(
            help="Also score realistic variants of each generated incident: all, or a comma list of frameless, prefixed, truncated, fragment, noversion, older_wording."
        ),
    ] = None,
    thresholds: Annotated[
        str | None,
        typer.Option(
            help="The gate's thresholds file (default: evals/thresholds_families.json for family incidents, else evals/thresholds.json)."
        ),
    ] = None,
) -> None:
    """Run the eval suite over recorded incidents (the shipped ones by default)."""
    raise typer.Exit(
        eval_command(
            incidents,
            against,
            out,
            baselines,
            gate=gate,
            replay=replay,
            variants=variants,
            thresholds=thresholds,
        )
    )


def _export_incidents(
    out_path: Annotated[
        Path | None, typer.Option("--out", help="JSONL file (default: stdout).")
    ] = None,
    source: Annotated[
        str | None, typer.Option(help="Only confirmations from api | slack | web.")
    ] = None,
) -> None:
    """Export confirmed triages ("this fixed it") as eval incidents, one JSON per line.

    The file feeds ``sglang-triage eval --incidents FILE``.
    """
    from kb.recording import export_confirmed
    from kb.records import Records
    from kb.store import Store

    settings = Settings()
    records = Records(reveal(settings.database_url) or settings.kb_path / "records.sqlite")
    store = Store(settings.kb_path / "index.sqlite")
    incidents = export_confirmed(records, store, source=source)
    if out_path is None:
        for inc in incidents:
            print(json.dumps(inc.model_dump(mode="json"), ensure_ascii=False))
    else:
        dump_incidents(incidents, out_path)
    Console(stderr=True).print(
        f"{len(incidents)} confirmed incident(s)"
        + (f" from {source}" if source else "")
        + (f" -> {out_path}" if out_path else "")
    )


def register(app: typer.Typer) -> None:
    """Add ``eval`` and ``export-incidents`` to the ``sglang-triage`` command line."""
    app.command(name="eval")(_eval)
    app.command(name="export-incidents")(_export_incidents)


__all__ = [
    "eval_command",
    "print_report",
    "print_variants",
    "register",
    "reliability_table",
    "variant_table",
]
