"""Terminal rendering of a triage result with rich.

Text from logs and from SGLang's source is printed as plain text (never parsed as rich
markup). Each fix shows its edit lines (``+ --speculative-num-steps 3``, ``- --dp 3``),
what it gives up, and then its full command on one line of its own (when the log showed no
full launch command, a sentence saying so takes its place): printed with
``soft_wrap`` so rich neither wraps nor crops it, whatever the terminal width. The
terminal may fold the line on screen, but it stays one line, so selecting it and
pasting it into a shell runs exactly the fix's ``command``.
"""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from service.engine import (
    FixOut,
    TriageResult,
    command_note,
    edit_lines,
    fix_search_line,
    hardware_line,
    model_facts_line,
    printed_line,
    upgrade_lines,
)


def _head(result: TriageResult) -> Text:
    rel = result.release
    head = Text(result.summary, style="bold")
    head.append(f"\n\nrelease {rel.release} ({rel.method}, confidence {rel.confidence})")
    if rel.note:
        head.append(f"\n{rel.note}")
    hardware = hardware_line(result.hardware)
    if hardware:
        head.append(f"\n{hardware}")
    rng = rel.range or {}
    if rng.get("releases"):
        head.append(f"\nrelease range {rng.get('text')}")
        head.append(
            "".join(f"\n  · {p['text']}" for p in rng.get("evidence") or [] if p.get("used"))
        )
        head.append("".join(f"\n  · {d}" for d in rng.get("differences") or []))
    if result.upgrade:
        head.append(f"\n{result.upgrade}")
    for line in (
        printed_line(result.printed),
        model_facts_line(result.model_facts),
        fix_search_line(result.fix_search),
    ):
        if line:
            head.append(f"\n{line}")
    return head


def render_fix(fix: FixOut, console: Console) -> None:
    """One fix: heading and verdict, its edit lines, what it gives up, then its command on
    one unwrapped line (see the module's docstring)."""
    head = Text(f"fix {fix.rank}" + (" (recommended)" if fix.recommended else ""), style="green")
    head.append(f": {fix.verdict}", style="default")
    console.print(head)
    for line in edit_lines(fix):
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
        console.print(Text(f"  {line}", style=style))
    if fix.gives_up:
        console.print(Text("  gives up: ", style="yellow") + Text(fix.gives_up))
    note = command_note(fix)
    if note is not None:  # not a command to run: the log showed no full one
        console.print(Text(f"  {note}", style="yellow"))
        return
    console.print(fix.command, markup=False, highlight=False, soft_wrap=True, crop=False)


def render_result(result: TriageResult, console: Console) -> None:
    console.print(
        Panel(_head(result), title="sglang-triage", subtitle=f"confidence {result.confidence}")
    )
    loc = result.location
    if loc is not None and loc.excerpt:
        code = "\n".join(e.text for e in loc.excerpt)
        hl = {e.line for e in loc.excerpt if e.highlight}
        console.print(
            Panel(
                Syntax(
                    code,
                    "python",
                    line_numbers=True,
                    start_line=loc.excerpt[0].line,
                    highlight_lines=hl,
                ),
                title=loc.citation,
            )
        )
    if result.rule:
        console.print(Text("rule: ", style="bold") + Text(result.rule))
    if result.evaluation is not None:
        table = Table(
            "atom", "role", "value", "inputs", title=f"evaluation: fired={result.evaluation.fired}"
        )
        for atom in result.evaluation.atoms:
            if not atom.failing and atom.value != "unknown":
                continue
            inputs = "; ".join(f"{i.name}={i.value!r} ({i.source})" for i in atom.inputs)
            table.add_row(Text(atom.text), atom.role, atom.value, Text(inputs))
        console.print(table)
    if result.arithmetic:
        console.print(Text("arithmetic: ", style="bold") + Text(result.arithmetic))
    for i, line in enumerate(upgrade_lines(result.upgrade_fix)):
        console.print(
            Text(line, style="bold green" if i == 0 else ""),
            markup=False,
            highlight=False,
            soft_wrap=True,
            crop=False,
        )
    for fix in result.fixes[:3]:
        render_fix(fix, console)
    if result.no_flag_fix:
        console.print(Text("no flag fix: ", style="yellow") + Text(result.no_flag_fix))
    for u in result.unknowns:
        console.print(
            Text("unknown ", style="yellow") + Text(f"{u.what}: {u.why} (settle: {u.settle})")
        )
