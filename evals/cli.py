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
from rich.console import Console
from rich.table import Table

from evals.gate import check_gate
from evals.incidents import IncidentError, dump_incidents, load_incidents
from evals.reports import LABELS, write_reports
from evals.runner import EvalReport, run_eval
from evals.scoring import METRICS
from service.settings import Settings

_SHORT = {"release_at_1": "rel", "exact_location": "loc", "function_match": "fn",
          "rc_precision": "rcP", "rc_recall": "rcR", "fix_valid": "valid",
          "fix_match": "match", "no_fix_declined": "decl", "grounded": "gnd"}


def _cell(value: object) -> str:
    if value is None:
        return "[dim]·[/dim]"
    if value is True:
        return "[green]✓[/green]"
    if value is False:
        return "[red]✗[/red]"
    v = float(value)  # type: ignore[arg-type]
    colour = "green" if v >= 0.999 else ("yellow" if v > 0 else "red")
    return f"[{colour}]{v:.2f}[/{colour}]"


def print_report(report: EvalReport, console: Console) -> None:
    eng = report.engine
    table = Table(title=f"engine on {report.incidents} incidents ({report.target})",
                  show_lines=False)
    table.add_column("incident", overflow="fold")
    table.add_column("cat")
    table.add_column("status")
    for m in METRICS:
        table.add_column(_SHORT[m], justify="center")
    table.add_column("ms", justify="right")
    for s in eng.incidents:
        status = f"[red]{s.error[:40]}[/red]" if s.error else s.status
        table.add_row(s.id, s.category, status, *(_cell(s.metrics.get(m)) for m in METRICS),
                      f"{s.latency_ms:.0f}")
    console.print(table)
    agg = Table(title="aggregate (mean over incidents where a metric applies)")
    agg.add_column("metric")
    for name in report.systems:
        agg.add_column(name, justify="right")
    for m in METRICS:
        agg.add_row(LABELS[m], *(
            f"{a[m]:.3f} (n={a[f'{m}_n']})" if a.get(m) is not None else "–"
            for a in (s.aggregate for s in report.systems.values())))
    for key in ("latency_p50_ms", "latency_p95_ms", "errors"):
        agg.add_row(key, *(str(s.aggregate.get(key)) for s in report.systems.values()))
    console.print(agg)


def eval_command(incidents: list[str] | None, against: str | None, out: str, baselines: bool,
                 *, gate: bool = False, settings: Settings | None = None,
                 console: Console | None = None) -> int:
    """Run the eval over ``incidents`` (files/folders; the shipped ones when None)."""
    from kb.knowledge import KnowledgeBase

    console = console or Console()
    try:
        items = load_incidents(incidents or None)
    except IncidentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    settings = settings or Settings()
    kb = KnowledgeBase(settings)
    has_kb = bool(kb.store.releases())
    if against is None and not has_kb:
        console.print("[red]error:[/red] the KB holds no releases; run "
                      "`sglang-triage ingest --defaults` or pass --against URL")
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
        report = run_eval(items, target, kb=kb if has_kb else None, baselines=baselines)
    print_report(report, console)
    paths = write_reports(report, out)
    console.print("reports: " + ", ".join(str(p) for p in paths.values()))
    failures = check_gate(report)
    if failures:
        console.print("[yellow]gate:[/yellow] " + "; ".join(failures))
    else:
        console.print("[green]gate holds[/green]")
    return 1 if gate and failures else 0


def _eval(
    incidents: Annotated[list[str] | None, typer.Option("--incidents", help="JSONL files or folders.")] = None,
    against: Annotated[str | None, typer.Option(help="URL of a running service (else in-process).")] = None,
    out: Annotated[str, typer.Option(help="Folder for the JSON, markdown and PNG reports.")] = "evals/reports",
    baselines: Annotated[bool, typer.Option(help="Score the grep and naive-RAG baselines too.")] = True,
    gate: Annotated[bool, typer.Option(help="Exit 1 when a metric is below the checked-in thresholds.")] = False,
) -> None:
    """Run the eval suite over recorded incidents (the shipped ones by default)."""
    raise typer.Exit(eval_command(incidents, against, out, baselines, gate=gate))


def _export_incidents(
    out_path: Annotated[Path | None, typer.Option("--out", help="JSONL file (default: stdout).")] = None,
    source: Annotated[str | None, typer.Option(help="Only confirmations from api | slack | web.")] = None,
) -> None:
    """Export confirmed triages ("this fixed it") as eval incidents, one JSON per line.

    The file feeds ``sglang-triage eval --incidents FILE``.
    """
    from kb.recording import export_confirmed
    from kb.records import Records
    from kb.store import Store

    settings = Settings()
    records = Records(settings.kb_path / "records.sqlite")
    store = Store(settings.kb_path / "index.sqlite")
    incidents = export_confirmed(records, store, source=source)
    if out_path is None:
        for inc in incidents:
            print(json.dumps(inc.model_dump(mode="json"), ensure_ascii=False))
    else:
        dump_incidents(incidents, out_path)
    Console(stderr=True).print(f"{len(incidents)} confirmed incident(s)"
                  + (f" from {source}" if source else "") + (f" -> {out_path}" if out_path else ""))


def register(app: typer.Typer) -> None:
    """Add ``eval`` and ``export-incidents`` to the ``sglang-triage`` command line."""
    app.command(name="eval")(_eval)
    app.command(name="export-incidents")(_export_incidents)


__all__ = ["eval_command", "print_report", "register"]
