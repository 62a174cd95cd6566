"""``sglang-triage serve`` (the HTTP API under uvicorn, JSON-lines logs) and
``sglang-triage slack`` (the Slack bot over Socket Mode)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kb.errors import TriageError
from service.cli.console import console, fail, settings

__all__ = ["serve", "serve_log_config", "slack"]


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
    atlas_since: Annotated[
        str | None,
        typer.Option(
            help="Fill the atlas of every release from this version on in a background "
            "process while serving (`make run` passes 0.4.0); its log is <home>/background.log."
        ),
    ] = None,
    embed_defaults: Annotated[
        bool,
        typer.Option(
            "--embed-defaults",
            help="Compute the embeddings of default releases indexed without them in a "
            "background process while serving, and store them (`make run`: it serves "
            "after the structure alone; search is keyword-only until then).",
        ),
    ] = False,
) -> None:
    """Run the HTTP API (FastAPI + uvicorn); logs are JSON lines on stderr. A connection whose
    request headers have not all arrived within TRIAGE_HEADER_TIMEOUT_S is closed.

    ``--workers N`` with N > 1 is refused (exit 2) while the KB's vectors live in the embedded
    Chroma, a single-process store that several workers would corrupt: run ``chroma run`` and
    set ``TRIAGE_CHROMA_URL`` (docs/configuration.md), or serve with one worker.
    """
    if workers > 1 and not settings().chroma_url:
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

    filler = None
    if atlas_since or embed_defaults:
        from service.cli.background import BackgroundFill

        filler = BackgroundFill(settings(), embed=embed_defaults, atlas_since=atlas_since)
        filler.start()
        console.print(f"filling in the background; its log is {filler.log_path}")
    try:
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
    finally:
        if filler is not None:
            filler.stop()


def serve_log_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging config: every line one JSON object on stderr
    (:func:`service.api.logs.log_config`), with the API's own access lines instead of uvicorn's.

    :class:`~service.api.app.RequestIdMiddleware` logs one line per request to
    ``sglang_triage.access`` (request id, method, path, status, duration_ms, client);
    uvicorn's plain access log would only repeat it, without the id.
    """
    from service.api.logs import log_config

    return log_config(access_log=access_log)


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
    from service.slack.serve import run_socket_mode

    try:
        run_socket_mode(settings())
    except TriageError as exc:
        fail(exc)
