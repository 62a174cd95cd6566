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
from typing import Annotated

import typer
from rich.table import Table

from kb.errors import TriageError
from service.cli import atlas_command, ingest_command, launch, serve
from service.cli.console import console, fail, out
from service.cli.console import settings as load_settings

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Explain why an SGLang server refused to start, and check the fix.",
)
app.command()(ingest_command.ingest)
app.command()(atlas_command.atlas)


@app.command()
def releases(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the releases in the KB."""
    from kb.knowledge import KnowledgeBase

    rows = KnowledgeBase(load_settings()).store.releases()
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
        result = hybrid_search(KnowledgeBase(load_settings()), query, release, k=k)
    except TriageError as exc:
        fail(exc)
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
    from service.cli.render import render_result
    from service.engine import Engine
    from service.usecase import TriageRequest, TriageUseCase

    text = sys.stdin.read() if file == "-" else Path(file).read_text(errors="replace")
    payload: str | dict = {"log": text, "command": command} if command else text
    try:
        settings = load_settings()
        ask = TriageRequest(
            payload, release=release, hardware=hardware, model=model, model_arch=model_arch
        )
        usecase = TriageUseCase(Engine(KnowledgeBase(settings)), settings)
        result = usecase.answer(ask)  # no on_update: waits for an on-demand ingest
    except TriageError as exc:
        fail(exc)
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

    settings = load_settings()
    n = records_for(settings).purge(
        max_age_days=settings.records_max_age_days if max_age_days is None else max_age_days,
        max_count=settings.records_max_count if max_count is None else max_count,
        keep_confirmed=not include_confirmed,
        max_bytes=settings.records_max_bytes if max_bytes is None else max_bytes,
    )
    console.print(
        f"{n} stored triage(s) purged" + ("" if include_confirmed else "; confirmed ones kept")
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
        except Exception as exc:
            console.print(f"[yellow]warning:[/yellow] CLI plugin {ep.name!r} not loaded: {exc}")


app.command()(serve.serve)
app.command()(serve.slack)
app.command(
    name="run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)(launch.run_launch)
app.command()(launch.watch)
__import__("service.cli.worker", fromlist=["register"]).register(app)  # replay-worker
_load_plugins()


if __name__ == "__main__":  # pragma: no cover - `python -m service.cli.main`
    app()
