"""``sglang-triage eval``: run the eval suite and print a per-incident table.

The lead wires :func:`eval_command` as a typer command; it prints the table
and the aggregate metrics with rich, writes ``report.json``, ``report.md`` and
``metrics_by_category.png`` to ``out`` and returns the exit code (1 when the
CI gate fails and ``gate`` is set, 2 on bad input, else 0).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from service.settings import Settings
from evals.gate import check_gate
from kb.incidents import IncidentError, load_incidents
from evals.reports import LABELS, write_reports
from evals.runner import EvalReport, run_eval
from evals.scoring import METRICS

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
        from service.engine.triage import Engine

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


__all__ = ["eval_command", "print_report"]


if __name__ == "__main__":  # pragma: no cover - for manual runs before the lead wires it
    import sys

    raise SystemExit(eval_command(None, None, str(Path("eval-out")), "--baselines" in sys.argv))
