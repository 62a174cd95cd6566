"""Terminal rendering of a triage result with rich."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from service.engine import TriageResult


def render_result(result: TriageResult, console: Console) -> None:
    rel = result.release
    head = f"[bold]{result.summary}[/bold]\n\nrelease {rel.get('release')} ({rel.get('method')}, " \
           f"confidence {rel.get('confidence')})"
    if rel.get("note"):
        head += f"\n{rel['note']}"
    rng = rel.get("range") or {}
    if rng.get("releases"):
        head += f"\nrelease range {rng.get('text')}"
        head += "".join(f"\n  · {p['text']}" for p in rng.get("evidence") or [] if p.get("used"))
        head += "".join(f"\n  · {d}" for d in rng.get("differences") or [])
    if result.upgrade:
        head += f"\n{result.upgrade}"
    console.print(Panel(head, title="sglang-triage", subtitle=f"confidence {result.confidence}"))
    loc = result.location
    if loc is not None and loc.excerpt:
        code = "\n".join(e.text for e in loc.excerpt)
        hl = {e.line for e in loc.excerpt if e.highlight}
        console.print(Panel(Syntax(code, "python", line_numbers=True, start_line=loc.excerpt[0].line,
                                   highlight_lines=hl), title=loc.citation))
    if result.evaluation is not None:
        table = Table("atom", "role", "value", "inputs", title=f"evaluation: fired={result.evaluation.fired}")
        for atom in result.evaluation.atoms:
            if not atom.failing and atom.value != "unknown":
                continue
            inputs = "; ".join(f"{i.name}={i.value!r} ({i.source})" for i in atom.inputs)
            table.add_row(atom.text, atom.role, atom.value, inputs)
        console.print(table)
    for fix in result.fixes[:3]:
        star = " (recommended)" if fix.recommended else ""
        console.print(f"[green]fix {fix.rank}{star}[/green]: {fix.verdict}")
        console.print(f"  {fix.command}", markup=False, highlight=False)
    if result.no_flag_fix:
        console.print(f"[yellow]no flag fix:[/yellow] {result.no_flag_fix}")
    for u in result.unknowns:
        console.print(f"[yellow]unknown[/yellow] {u.what}: {u.why} (settle: {u.settle})")
