"""``sglang-triage ingest``: SGLang releases into the KB, one progress bar per stage, and
the summary table of ``--all`` (every release on the index, ingested or skipped, and why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kb.errors import TriageError
from kb.versions import version_key
from service.cli.console import console, fail, out
from service.cli.console import settings as load_settings
from service.settings import Settings

__all__ = ["BarProgress", "ingest"]


class BarProgress:
    """Adapts the ingest progress callback to one rich bar per stage."""

    def __init__(self, bar: Progress, version: str) -> None:
        self.bar, self.version, self.tasks = bar, version, {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"{self.version} {stage}", total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)


def ingest(
    release: Annotated[
        list[str] | None,
        typer.Option(
            "--release",
            "-r",
            help="PyPI release, or a dev build such as 0.5.19.dev410+gedff717ef "
            "(needs TRIAGE_SGLANG_GIT); repeatable.",
        ),
    ] = None,
    path: Annotated[
        list[Path] | None, typer.Option("--path", help="Local checkout or site-packages.")
    ] = None,
    version: Annotated[
        str | None, typer.Option(help="Version for --path when metadata has none.")
    ] = None,
    scope: Annotated[str, typer.Option(help="Embedding scope: none | default | full.")] = "default",
    force: Annotated[bool, typer.Option(help="Re-index even if unchanged.")] = False,
    defaults: Annotated[bool, typer.Option("--defaults", help="Ingest TRIAGE_RELEASES.")] = False,
    all_releases: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every release on the index (structure only; TRIAGE_RELEASES also "
            "embedded in --scope), oldest first.",
        ),
    ] = False,
    since: Annotated[
        str | None, typer.Option(help="With --all: releases from this version on.")
    ] = None,
    vectors_only: Annotated[
        bool,
        typer.Option(
            "--vectors-only",
            help="Compute the embeddings into the KB's vector cache but leave Chroma alone "
            "(the serving process that owns an embedded Chroma stores them: serve --embed-defaults).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Download (or read) SGLang releases and index them into the KB."""
    from ingest.acquire import fetch_any
    from ingest.pipeline import ingest as run_ingest
    from kb.knowledge import KnowledgeBase
    from kb.sources import read_local

    settings = load_settings()
    releases = list(release or [])
    if defaults:
        releases += [r for r in settings.releases if r not in releases]
    if since and not all_releases:
        console.print("--since goes with --all")
        raise typer.Exit(2)
    if vectors_only and all_releases:  # --all embeds through its own batch path, into Chroma
        console.print("--vectors-only goes with --release, --path or --defaults, not --all")
        raise typer.Exit(2)
    if not releases and not path and not all_releases:
        console.print("nothing to ingest: give --release, --path, --defaults or --all")
        raise typer.Exit(2)
    kb = KnowledgeBase(settings)
    reports = []
    everything = None
    try:
        sources = [fetch_any(r, settings) for r in releases]
        sources += [read_local(p, version=version) for p in (path or [])]
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            for src in sources:
                progress = BarProgress(bar, src.version)
                report = run_ingest(
                    kb, src, scope=scope, force=force, progress=progress, chroma=not vectors_only
                )
                reports.append(report.as_dict())
                _print_report(report)
            if all_releases:
                everything = _ingest_all(kb, settings, bar, since=since, scope=scope, force=force)
    except TriageError as exc:
        fail(exc)
    if everything is not None:
        _print_all(everything)
    if as_json:
        payload: Any = reports
        if everything is not None:
            payload = {
                **everything.as_dict(),
                "releases": reports + everything.as_dict()["releases"],
            }
        out.print_json(json.dumps(payload))


def _print_report(report: Any) -> None:
    console.print(
        f"[green]{report.version}[/green] {report.structure}: {report.files} files, "
        f"{report.functions} functions, {report.checks} checks, {report.flags} flags; "
        f"embedded {report.embedded} new, {report.reused} reused "
        f"({report.scope}); {report.timings}"
    )
    if report.parse_errors:
        console.print(
            f"  [yellow]{len(report.parse_errors)} files with syntax "
            f"errors (indexed as far as they parse)[/yellow]"
        )


def _ingest_all(
    kb: Any, settings: Settings, bar: Progress, *, since: str | None, scope: str, force: bool
) -> Any:
    """``--all``: :func:`ingest.acquire.batch.ingest_all` with a bar per release."""
    from ingest.acquire.batch import ingest_all
    from ingest.acquire.pypi_index import Skip

    def told(outcome: Any) -> None:
        if isinstance(outcome, Skip):
            console.print(f"[yellow]{outcome.version}[/yellow] skipped: {outcome.reason}")
        else:
            _print_report(outcome)

    return ingest_all(
        kb,
        settings,
        since=since,
        scope=scope,
        force=force,
        progress_for=lambda v: BarProgress(bar, v),
        on_release=told,
    )


def _print_all(result: Any) -> None:
    """The summary table of ``--all``: every release ingested or skipped, and why."""

    table = Table(
        "release",
        "outcome",
        "files parsed / reused",
        "seconds",
        "why",
        title=f"{len(result.reports)} ingested, {len(result.skipped)} skipped "
        f"of {result.listed} listed ({result.index_url})",
    )
    rows = [
        (
            r.version,
            r.structure,
            f"{r.parsed} / {r.reused_files}",
            str(round(r.timings.get("structure_s", 0) + r.timings.get("embed_s", 0), 1)),
            "",
        )
        for r in result.reports
    ]
    rows += [(s.version, "skipped", "", "", s.reason) for s in result.skipped]

    for row in sorted(rows, key=lambda row: version_key(row[0])):
        table.add_row(*row)
    console.print(table)
