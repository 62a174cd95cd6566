"""``sglang-triage lint``: check launch flags against the rule cards and print the verdicts.

The payload (violations, unknown cards, verified fixes) is the engine's
:func:`service.engine.lint_payload`, the same one ``POST /lint`` returns; this
module only renders it with rich and sets the exit status.

``lint --from FILE`` (:func:`lint_from_command`) lints every launch command that
:mod:`service.cli.commands_from` finds in shell and Slurm scripts, systemd units, compose
files and Kubernetes manifests, each against ``--release`` or the release the file names
(:func:`choose_release`); the ``SGLANG_*``/``SGL_*`` variables it sets for the command are
facts of the lint. Variables the file leaves open stay as written: the parse errors
and "unknown flags" they cause are set aside, and the cards that read them stay undecided.
Exit status: 0 every command ok, 1 an error card violated, 2 a usage error or a file with no
launch command (unless ``--skip-empty``).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from rich.console import Console
from rich.markup import escape

from kb.errors import TriageError
from kb.versions import version_key
from service.cli.commands_from import LaunchCommand, ReleaseHint, extract
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
            console.print(
                f"    fix ({tag}, {escape(fix.origin)}): {escape(fix.command)}", highlight=False
            )
            if not fix.verified:
                console.print(f"      {escape(fix.note)}", style="dim")
    for f in report.unknown[:10]:
        console.print(
            f"[cyan]? {escape(f.rule)}[/cyan] {escape(f.title)} — {escape(f.reason)}",
            highlight=False,
        )
    if len(report.unknown) > 10:
        console.print(f"[cyan]? … {len(report.unknown) - 10} more undecided cards[/cyan]")
    if report.background:
        console.print(
            f"[dim]{len(report.background)} card(s) are violated by --model-path alone "
            "on this machine and model and are not counted[/dim]"
        )
    errors = sum(1 for f in report.violated if f.severity == "error")
    warnings = len(report.violated) - errors
    verdict = "[green]ok[/green]" if report.ok else "[red]would fail[/red]"
    console.print(
        f"{verdict}: {errors} error(s), {warnings} warning(s), "
        f"{len(report.unknown)} undecided; {report.timings_ms.get('total', 0)} ms"
    )


def lint_command(
    release: str, hardware: str | None, model_arch: str | None, flags: list[str], as_json: bool
) -> int:
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


#: environment variables the file sets that reach the linter as facts (SGLang's own)
_SGLANG_ENV = ("SGLANG_", "SGL_")
_SECRET_RE = re.compile(r"TOKEN|KEY|SECRET|PASSW|AUTH|CREDENTIAL", re.I)


def choose_release(
    asked: str | None, hint: ReleaseHint | None, ingested: list[str]
) -> tuple[str, str]:
    """(release to lint against, why): ``asked`` wins; else the release the file names when it
    is ingested, else the nearest ingested one not after it (the oldest when all are later);
    else the newest ingested release. Every choice not asked for is said as an assumption.

    Raises :class:`ValueError` when nothing is asked and the KB has no release.
    """
    said = f"{hint.version} ({hint.source}, line {hint.line})" if hint else ""
    if asked:
        other = f"; the file names {said}" if hint and hint.version != asked else ""
        return asked, f"as asked (--release){other}"
    if not ingested:
        raise ValueError(
            "no release is in the KB: run `sglang-triage ingest --release X` or give --release"
        )
    ordered = sorted(ingested, key=version_key)
    if hint is None:
        return ordered[-1], (
            "assumed: the file names no release, so the newest ingested "
            "one (give --release to choose)"
        )
    if hint.version in ingested:
        return hint.version, f"from the file: {said}"
    key = version_key(hint.version)
    before = [v for v in ordered if version_key(v) <= key]
    near = before[-1] if before else ordered[0]
    return near, (
        f"assumed: the file names {said}, which is not in the KB, so the nearest "
        f"ingested release (`sglang-triage ingest --release {hint.version}` to "
        "lint against it)"
    )


def _set_aside(report: LintReport, unresolved: list[str]) -> LintReport:
    """The report without the parse errors and unknown flags that unresolved variables cause,
    its commands showing those tokens as written (``$PORT``, not ``'$PORT'``)."""
    if not unresolved:
        return report

    def held(text: str) -> bool:
        return any(u in text for u in unresolved)

    quoted = {shlex.quote(t): t for t in report.argv if held(t) and shlex.quote(t) != t}

    def as_written(command: str) -> str:
        for q, t in quoted.items():
            command = command.replace(q, t)
        return command

    for finding in report.violated:
        for fix in finding.fixes:
            fix.command = as_written(fix.command)
    return report.model_copy(
        update={
            "command": as_written(report.command),
            "parse_errors": [p for p in report.parse_errors if not held(p)],
            "unknown_flags": [u for u in report.unknown_flags if not held(u)],
        }
    )


def _entry(cmd: LaunchCommand, release: str, why: str, report: LintReport) -> dict[str, Any]:
    return {
        "file": cmd.file,
        "line": cmd.line,
        "kind": cmd.kind,
        "where": cmd.where,
        "command": cmd.command,
        "launcher": cmd.launcher,
        "argv": cmd.argv,
        "env": {k: "<redacted>" if _SECRET_RE.search(k) else v for k, v in cmd.env.items()},
        "unresolved": cmd.unresolved,
        "assumed": cmd.assumed,
        "release": release,
        "release_source": why,
        "ok": report.ok,
        "report": report.model_dump(mode="json"),
    }


def _print_entry(
    cmd: LaunchCommand, release: str, why: str, report: LintReport, console: Console
) -> None:
    console.print(
        f"[bold]{escape(cmd.file)}:{cmd.line}[/bold]  ({escape(cmd.kind)}, {escape(cmd.where)})",
        soft_wrap=True,
        highlight=False,
    )
    console.print(f"release {escape(release)}: {escape(why)}", soft_wrap=True, highlight=False)
    if cmd.unresolved:
        console.print(
            f"[yellow]left as written:[/yellow] {escape(', '.join(cmd.unresolved))} "
            "(the file does not say their value; cards reading them stay undecided)",
            soft_wrap=True,
            highlight=False,
        )
    for a in cmd.assumed:
        console.print(f"[cyan]assumed:[/cyan] {escape(a)}", soft_wrap=True, highlight=False)
    render_report(report, console)


_FROM_OPTIONS = {
    "--release": "release",
    "-r": "release",
    "--hardware": "hardware",
    "--model-arch": "model_arch",
}
_FROM_FLAGS = {"--json": "as_json", "--skip-empty": "skip_empty"}


def _from_arguments(tokens: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(files, lint options) of what follows ``--from``. pre-commit appends a hook's ``args``
    after its entry (``… lint --skip-empty --from``) and the file names after those, so the
    lint options may come among the files; launch flags may not."""
    files: list[str] = []
    given: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name, eq, value = tok.partition("=")
        if tok in _FROM_FLAGS:
            given[_FROM_FLAGS[tok]] = True
        elif name in _FROM_OPTIONS and eq:
            given[_FROM_OPTIONS[name]] = value
        elif tok in _FROM_OPTIONS and i + 1 < len(tokens):
            given[_FROM_OPTIONS[tok]] = tokens[i + 1]
            i += 1
        elif tok.startswith("-") and tok != "-":
            raise ValueError(
                f"--from takes files, not launch flags: {tok} "
                "(lint --release X -- <flags> lints flags)"
            )
        else:
            files.append(tok)
        i += 1
    if not files:
        raise ValueError("--from needs a file")
    return files, given


def lint_from_command(
    files: list[str],
    release: str | None,
    hardware: str | None,
    model_arch: str | None,
    as_json: bool,
    skip_empty: bool = False,
) -> int:
    """``sglang-triage lint --from FILE…``: lint every launch command of every file.

    Returns 0 when every command is ok, 1 when one violates an error card, 2 on a usage error,
    an unreadable file or a file with no launch command (``skip_empty``: said, not an error).
    """
    from service.settings import Settings
    from service.wiring import kb_for

    # errors name files: never folded inside a path (a terminal folds the line itself)
    out, err = Console(), Console(stderr=True, soft_wrap=True)
    try:
        files, given = _from_arguments(files)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return 2
    release, hardware = given.get("release", release), given.get("hardware", hardware)
    model_arch = given.get("model_arch", model_arch)
    as_json, skip_empty = given.get("as_json", as_json), given.get("skip_empty", skip_empty)
    try:
        store = kb_for(Settings()).store
        ingested = [
            r["version"] for r in store.releases() if r["status"] in ("indexed", "complete")
        ]
    except TriageError as exc:
        err.print(f"[red]error:[/red] {escape(exc.message)}")
        return 2
    if release is not None and release not in ingested:
        err.print(
            f"[red]error:[/red] release {escape(release)} is not in the KB (ingested: "
            f"{escape(', '.join(sorted(ingested, key=version_key)) or 'none')}); run "
            f"`sglang-triage ingest --release {escape(release)}`"
        )
        return 2
    status, entries, failed, total = 0, [], 0, 0
    for name in files:
        try:
            found = extract(name)
        except ValueError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            status = 2
            continue
        if not found.commands:
            said = (
                f"{name}: no SGLang launch command found (read as {found.kind}; looked for "
                "`python -m sglang.launch_server …` and `sglang serve …`, also under "
                "srun/torchrun/exec/docker run/sh -c)"
            )
            err.print(
                f"[dim]{escape(said)}; skipped[/dim]"
                if skip_empty
                else f"[red]error:[/red] {escape(said)}",
                highlight=False,
            )
            status = status if skip_empty else 2
            continue
        for cmd in found.commands:
            total += 1
            try:
                chosen, why = choose_release(release, cmd.release_hint, ingested)
                env = {k: v for k, v in cmd.env.items() if k.startswith(_SGLANG_ENV)}
                report = lint(
                    store,
                    chosen,
                    cmd.argv,
                    hardware,
                    model_arch,
                    env=env or None,
                    prefix=" ".join(cmd.launcher),
                )
            except (TriageError, ValueError) as exc:
                err.print(
                    f"[red]error:[/red] {escape(cmd.file)}:{cmd.line}: "
                    f"{escape(getattr(exc, 'message', str(exc)))}"
                )
                status = 2
                continue
            report = _set_aside(report, cmd.unresolved)
            failed += not report.ok
            if as_json:
                entries.append(_entry(cmd, chosen, why, report))
            else:
                _print_entry(cmd, chosen, why, report, out)
    if as_json:
        out.print_json(json.dumps(entries))
    elif total:
        verdict = "[red]would fail[/red]" if failed else "[green]ok[/green]"
        out.print(
            f"{verdict}: {total} launch command(s) in {len(files)} file(s), {failed} would fail"
        )
    return status or (1 if failed else 0)


__all__ = ["choose_release", "lint_command", "lint_from_command", "render_report"]
