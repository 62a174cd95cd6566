"""``sglang-triage run`` (launch SGLang with the machine's facts, lint it first, triage a
start-up crash) and ``sglang-triage watch`` (follow a log stream, one report per crash
loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from service.cli.console import settings

__all__ = ["run_launch", "watch"]


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
    raise typer.Exit(run_use_case(list(ctx.args), options, settings(), render=render_result))


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
            settings=settings(),
        )
    )
