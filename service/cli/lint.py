"""``sglang-triage lint``: check launch flags against the rule cards and print the verdicts.

The payload (violations, unknown cards, verified fixes) is the engine's
:func:`service.engine.lint_payload`, the same one ``POST /lint`` returns; this
module only renders it with rich and sets the exit status.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from kb.errors import TriageError
from service.engine import LintReport, lint, split_command


def render_report(report: LintReport, console: Console) -> None:
    """Human-readable lint output (errors first, each with its best fix)."""
    head = f"SGLang {report.release}"
    if report.hardware:
        head += f" on {report.hardware}"
    if report.model_arch:
        head += f", model {report.model_arch}"
    console.print(f"[bold]{escape(head)}[/bold]: {escape(report.command)}")
    for problem in [*report.parse_errors, *(f"unknown flag {u}" for u in report.unknown_flags)]:
        console.print(f"  [yellow]parse:[/yellow] {escape(problem)}")
    for f in report.violated:
        mark = "[red]✗ error[/red]" if f.severity == "error" else "[yellow]! warning[/yellow]"
        console.print(f"{mark} [bold]{escape(f.rule)}[/bold] {escape(f.title)}")
        console.print(f"    {escape(f.reason)}", highlight=False)
        for c in f.citations[:3]:
            console.print(f"    cites {escape(c)}", style="dim")
        for fix in f.fixes[:2]:
            tag = "[green]verified[/green]" if fix.verified else "[yellow]not clean[/yellow]"
            console.print(f"    fix ({tag}, {escape(fix.origin)}): {escape(fix.command)}",
                          highlight=False)
            if not fix.verified:
                console.print(f"      {escape(fix.note)}", style="dim")
    for f in report.unknown[:10]:
        console.print(f"[cyan]? {escape(f.rule)}[/cyan] {escape(f.title)} — {escape(f.reason)}",
                      highlight=False)
    if len(report.unknown) > 10:
        console.print(f"[cyan]? … {len(report.unknown) - 10} more undecided cards[/cyan]")
    if report.background:
        console.print(f"[dim]{len(report.background)} card(s) are violated by --model-path alone "
                      "on this machine and model and are not counted[/dim]")
    errors = sum(1 for f in report.violated if f.severity == "error")
    warnings = len(report.violated) - errors
    verdict = "[green]ok[/green]" if report.ok else "[red]would fail[/red]"
    console.print(f"{verdict}: {errors} error(s), {warnings} warning(s), "
                  f"{len(report.unknown)} undecided; {report.timings_ms.get('total', 0)} ms")


def lint_command(release: str, hardware: str | None, model_arch: str | None,
                 flags: list[str], as_json: bool) -> int:
    """``sglang-triage lint``: print the report; exit code 0 ok, 1 error cards violated, 2 usage."""
    from service.settings import Settings
    from service.wiring import kb_for

    out, err = Console(), Console(stderr=True)
    try:
        store = kb_for(Settings()).store
        report = lint(store, release, split_command(flags), hardware, model_arch)
    except (TriageError, ValueError) as exc:
        err.print(f"[red]error:[/red] {escape(getattr(exc, 'message', str(exc)))}")
        return 2
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        render_report(report, out)
    return 0 if report.ok else 1


__all__ = ["lint_command", "render_report"]
