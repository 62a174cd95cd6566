"""The ``sglang-triage`` command line.

Sub-commands: ``ingest``, ``releases``, ``search``, ``serve``, ``slack``, ``triage``,
``lint`` (``--from FILE``: the commands in a script, unit or manifest), ``replay``, ``run``
(launch SGLang with the machine's facts, pre-flight, triage a start-up crash) and ``watch``
(follow a log stream, one report per crash loop); ``eval`` and ``export-incidents`` come from the eval suite
(:mod:`evals.cli`), registered through the ``sglang_triage.commands`` entry point. Every
command reads :class:`~service.settings.Settings` from the environment,
so ``TRIAGE_HOME``/``TRIAGE_KB_DIR`` pick the cache and KB folders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kb.errors import TriageError
from service.settings import Settings

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Explain why an SGLang server refused to start, and check the fix.",
)
console = Console(stderr=True)
out = Console()


def _settings() -> Settings:
    return Settings()


def _fail(exc: TriageError) -> None:
    console.print(f"[red]error:[/red] {exc.message}")
    raise typer.Exit(2)


class _BarProgress:
    """Adapts the ingest progress callback to one rich bar per stage."""

    def __init__(self, bar: Progress, version: str) -> None:
        self.bar, self.version, self.tasks = bar, version, {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"{self.version} {stage}", total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)


@app.command()
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
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Download (or read) SGLang releases and index them into the KB."""
    from ingest.acquire import fetch_any
    from ingest.pipeline import ingest as run_ingest
    from kb.knowledge import KnowledgeBase
    from kb.sources import read_local

    settings = _settings()
    releases = list(release or [])
    if defaults:
        releases += [r for r in settings.releases if r not in releases]
    if since and not all_releases:
        console.print("--since goes with --all")
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
                progress = _BarProgress(bar, src.version)
                report = run_ingest(kb, src, scope=scope, force=force, progress=progress)
                reports.append(report.as_dict())
                _print_report(report)
            if all_releases:
                everything = _ingest_all(kb, settings, bar, since=since, scope=scope, force=force)
    except TriageError as exc:
        _fail(exc)
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
        progress_for=lambda v: _BarProgress(bar, v),
        on_release=told,
    )


def _print_all(result: Any) -> None:
    """The summary table of ``--all``: every release ingested or skipped, and why."""
    from packaging.version import InvalidVersion, Version

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

    def key(row: tuple) -> tuple:
        try:
            return (0, Version(row[0]))
        except InvalidVersion:
            return (1, row[0])

    for row in sorted(rows, key=key):
        table.add_row(*row)
    console.print(table)


@app.command()
def releases(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the releases in the KB."""
    from kb.knowledge import KnowledgeBase

    rows = KnowledgeBase(_settings()).store.releases()
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(
        "release", "status", "files", "functions", "checks", "flags", "embedded", "origin"
    )
    for r in rows:
        table.add_row(
            r["version"],
            r["status"],
            str(r["files"]),
            str(r["functions"]),
            str(r["checks"]),
            str(r["flags"]),
            r["embedded_scope"] or "",
            r["origin"],
        )
    out.print(table)


@app.command()
def search(
    query: str,
    release: Annotated[str, typer.Option("--release", "-r")],
    k: Annotated[int, typer.Option("-k")] = 5,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Hybrid (BM25 + dense) search over one release's source."""
    from kb.knowledge import KnowledgeBase
    from kb.search import hybrid_search

    try:
        result = hybrid_search(KnowledgeBase(_settings()), query, release, k=k)
    except TriageError as exc:
        _fail(exc)
        return
    if as_json:
        out.print_json(json.dumps(result.as_dict()))
        return
    if result.degraded:
        console.print(f"[yellow]keyword only: {result.degraded}[/yellow]")
    for hit in result.hits:
        out.print(f"[bold]{hit.citation}[/bold]  {hit.qualname}  score={hit.score} {hit.ranks}")
        first = hit.text.strip().splitlines()[:3]
        for line in first:
            out.print(f"    {line}", markup=False, highlight=False)


@app.command()
def triage(
    file: Annotated[str, typer.Argument(help="Crash log file, or - for stdin.")],
    release: Annotated[str | None, typer.Option("--release", "-r")] = None,
    hardware: Annotated[
        str | None, typer.Option(help="Hardware profile, e.g. rtx-pro-6000-x8.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model path or name.")] = None,
    model_arch: Annotated[
        str | None, typer.Option(help="HF architecture, e.g. DeepseekV3ForCausalLM.")
    ] = None,
    command: Annotated[
        str | None, typer.Option(help="The launch command, if not in the log.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Diagnose a crash log and propose checked fixes."""
    from kb.knowledge import KnowledgeBase
    from service import ondemand
    from service.cli.render import render_result
    from service.engine import Engine

    text = sys.stdin.read() if file == "-" else Path(file).read_text(errors="replace")
    payload: str | dict = {"log": text, "command": command} if command else text
    try:
        settings = _settings()
        result = ondemand.triage(
            Engine(KnowledgeBase(settings)),
            settings,
            payload,
            release=release,
            hardware=hardware,
            model=model,
            model_arch=model_arch,
        )
    except TriageError as exc:
        _fail(exc)
        return
    if as_json:
        out.print_json(result.model_dump_json())
        return
    render_result(result, out)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def lint(
    ctx: typer.Context,
    release: Annotated[
        str | None,
        typer.Option(
            "--release", "-r", help="Required with launch flags; with --from, default: the file's."
        ),
    ] = None,
    from_files: Annotated[
        list[str] | None,
        typer.Option(
            "--from",
            help="Shell/Slurm script, systemd unit, compose file or Kubernetes manifest "
            "to lint every launch command of; repeatable (more files may follow).",
        ),
    ] = None,
    skip_empty: Annotated[
        bool,
        typer.Option(
            "--skip-empty", help="With --from: a file with no launch command is not an error."
        ),
    ] = False,
    hardware: Annotated[str | None, typer.Option(help="Hardware profile, e.g. b200-x8.")] = None,
    model_arch: Annotated[str | None, typer.Option(help="HF architecture.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check a launch command against the rule cards before anyone waits for a model to load.

    Usage: sglang-triage lint --release 0.5.11 --hardware rtx-pro-6000-x8 -- <launch flags>
    or:    sglang-triage lint --from deploy/sglang.service [--from k8s/sglang.yaml …]
    """
    from service.cli.lint import lint_command, lint_from_command

    if from_files:
        raise typer.Exit(
            lint_from_command(
                [*from_files, *ctx.args], release, hardware, model_arch, as_json, skip_empty
            )
        )
    if release is None:
        console.print("give --release X -- <launch flags>, or --from FILE")
        raise typer.Exit(2)
    raise typer.Exit(lint_command(release, hardware, model_arch, list(ctx.args), as_json))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def replay(
    ctx: typer.Context,
    release: Annotated[str, typer.Option("--release", "-r")],
    hardware: Annotated[
        str | None, typer.Option(help="Hardware profile, e.g. rtx-pro-6000-x8.")
    ] = None,
    model_arch: Annotated[
        str | None, typer.Option(help="HF architecture of the generated model.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run the release's own argument validation on a declared machine (CPU-only, isolated).

    Exit status: 0 passed, 1 SGLang refused the flags, 3 harness error (no verdict), 2 bad input.
    """
    from service.cli.replay import replay_command

    raise typer.Exit(replay_command(release, hardware, model_arch, list(ctx.args), as_json))


@app.command(name="purge-records")
def purge_records(
    max_age_days: Annotated[
        float | None, typer.Option(help="Default: TRIAGE_RECORDS_MAX_AGE_DAYS.")
    ] = None,
    max_count: Annotated[
        int | None, typer.Option(help="Default: TRIAGE_RECORDS_MAX_COUNT.")
    ] = None,
    include_confirmed: Annotated[
        bool,
        typer.Option(
            "--include-confirmed", help="Purge confirmed triages (recorded incidents) too."
        ),
    ] = False,
    max_bytes: Annotated[
        int | None, typer.Option(help="Default: TRIAGE_RECORDS_MAX_BYTES.")
    ] = None,
) -> None:
    """Apply the stored triages' retention limits now (the API also does so as it goes)."""
    from service.wiring import records_for

    settings = _settings()
    n = records_for(settings).purge(
        max_age_days=settings.records_max_age_days if max_age_days is None else max_age_days,
        max_count=settings.records_max_count if max_count is None else max_count,
        keep_confirmed=not include_confirmed,
        max_bytes=settings.records_max_bytes if max_bytes is None else max_bytes,
    )
    console.print(
        f"{n} stored triage(s) purged" + ("" if include_confirmed else "; confirmed ones kept")
    )


@app.command()
def serve(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            min=1, help="uvicorn workers; more than one needs a Chroma server (TRIAGE_CHROMA_URL)."
        ),
    ] = 1,
    access_log: Annotated[
        bool, typer.Option(help="One JSON line per request (with its x-request-id).")
    ] = True,
) -> None:
    """Run the HTTP API (FastAPI + uvicorn); logs are JSON lines on stderr. A connection whose
    request headers have not all arrived within TRIAGE_HEADER_TIMEOUT_S is closed.

    ``--workers N`` with N > 1 is refused (exit 2) while the KB's vectors live in the embedded
    Chroma, a single-process store that several workers would corrupt: run ``chroma run`` and
    set ``TRIAGE_CHROMA_URL`` (docs/configuration.md), or serve with one worker.
    """
    if workers > 1 and not _settings().chroma_url:
        console.print(
            f"[red]error:[/red] --workers {workers} needs a Chroma server: the embedded Chroma "
            "is a single-process store. Run `chroma run --path ~/.cache/sglang-triage/chroma "
            "--port 8001`, set TRIAGE_CHROMA_URL=http://127.0.0.1:8001 (and ingest into it), "
            "or serve with --workers 1.",
            soft_wrap=True,
        )
        raise typer.Exit(2)
    import uvicorn

    from service.api.protocol import protocol_path

    # the protocol closes connections whose headers do not arrive (TRIAGE_HEADER_TIMEOUT_S)
    uvicorn.run(
        "service.api.app:app",
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=False,
        log_config=serve_log_config(access_log),
        http=protocol_path(),
    )


def serve_log_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging config: every line one JSON object on stderr
    (:func:`service.api.logs.log_config`), with the API's own access lines instead of uvicorn's.

    :class:`~service.api.app.RequestIdMiddleware` logs one line per request to
    ``sglang_triage.access`` (request id, method, path, status, duration_ms, client);
    uvicorn's plain access log would only repeat it, without the id.
    """
    from service.api.logs import log_config

    return log_config(access_log=access_log)


@app.command()
def slack(
    socket: Annotated[
        bool, typer.Option("--socket", help="Socket Mode (TRIAGE_SLACK_APP_TOKEN).")
    ] = False,
) -> None:
    """Run the Slack bot over Socket Mode (HTTP Events mode is served by `serve` at /slack/events)."""
    if not socket:
        console.print(
            "HTTP mode: set TRIAGE_SLACK_BOT_TOKEN and TRIAGE_SLACK_SIGNING_SECRET and run "
            "`sglang-triage serve`; events go to /slack/events"
        )
        raise typer.Exit(2)
    from service.slack.bot import run_socket_mode

    try:
        run_socket_mode(_settings())
    except TriageError as exc:
        _fail(exc)


@app.command(
    name="run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def run_launch(
    ctx: typer.Context,
    preflight: Annotated[
        str, typer.Option(help="warn | strict (exit 2 on an error card) | off.")
    ] = "warn",
    release: Annotated[
        str | None, typer.Option("--release", "-r", help="Instead of the installed one.")
    ] = None,
    hardware: Annotated[
        str | None, typer.Option(help="Profile instead of the detected GPUs.")
    ] = None,
    report_to: Annotated[
        str | None, typer.Option(help="sglang-triage service URL to POST a crash to.")
    ] = None,
    slack_channel: Annotated[
        str | None, typer.Option(help="Slack channel for a crash report.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The report as one JSON line on stderr.")
    ] = False,
    preflight_replay: Annotated[
        bool,
        typer.Option(
            "--preflight-replay",
            help="Also replay the release's validation (sandbox, cached wheel).",
        ),
    ] = False,
) -> None:
    """Launch SGLang with the machine's facts known, lint it first, and triage a start-up crash.

    Usage: sglang-triage run [--preflight warn|strict|off] -- python -m sglang.launch_server ...
    """
    from service.cli.render import render_result
    from service.watch.run import RunOptions
    from service.watch.run import run as run_use_case

    options = RunOptions(
        preflight=preflight,
        release=release,
        hardware=hardware,
        report_to=report_to,
        slack_channel=slack_channel,
        as_json=as_json,
        replay=preflight_replay,
    )
    raise typer.Exit(run_use_case(list(ctx.args), options, _settings(), render=render_result))


@app.command()
def watch(
    file: Annotated[Path | None, typer.Option(help="A log file to follow (rotation too).")] = None,
    journald: Annotated[
        str | None, typer.Option(help="Follow a systemd unit (journalctl -fu UNIT).")
    ] = None,
    docker: Annotated[
        str | None, typer.Option(help="Follow a container (docker logs -f NAME).")
    ] = None,
    kubectl: Annotated[str | None, typer.Option(help="Follow a pod (kubectl logs -f POD).")] = None,
    release: Annotated[str | None, typer.Option("--release", "-r")] = None,
    hardware: Annotated[
        str | None, typer.Option(help="Hardware profile, e.g. rtx-pro-6000-x8.")
    ] = None,
    gpus_from: Annotated[
        Path | None, typer.Option(help="Recorded nvidia-smi --query-gpu CSV.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON lines: report and repeat events.")
    ] = False,
    report_to: Annotated[
        str | None, typer.Option(help="sglang-triage service URL to POST reports to.")
    ] = None,
    slack_channel: Annotated[
        str | None, typer.Option(help="Slack channel; repeats reply in its thread.")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow/--no-follow", help="--no-follow: read to the end, exit.")
    ] = True,
) -> None:
    """Follow a log stream (stdin by default), triage each start-up crash once, count a crash loop."""
    from service.watch.watcher import watch_command

    raise typer.Exit(
        watch_command(
            file=file,
            journald=journald,
            docker=docker,
            kubectl=kubectl,
            release=release,
            hardware=hardware,
            gpus_from=gpus_from,
            as_json=as_json,
            report_to=report_to,
            slack_channel=slack_channel,
            follow=follow,
            settings=_settings(),
        )
    )


def _load_plugins() -> None:
    """Add the sub-commands other installed parts register (group ``sglang_triage.commands``).

    The eval suite registers ``eval`` and ``export-incidents`` this way: it sits on top of the
    service, so the service's CLI finds it through its entry point instead of importing it.
    A plugin that fails to load is reported and skipped; the service's own commands still run.
    """
    from importlib.metadata import entry_points

    for ep in entry_points(group="sglang_triage.commands"):
        try:
            ep.load()(app)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the CLI
            console.print(f"[yellow]warning:[/yellow] CLI plugin {ep.name!r} not loaded: {exc}")


__import__("service.cli.worker", fromlist=["register"]).register(app)  # replay-worker
_load_plugins()


if __name__ == "__main__":  # pragma: no cover - `python -m service.cli.main`
    app()
