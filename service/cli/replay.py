"""``sglang-triage replay --release 0.5.11 --hardware rtx-pro-6000-x8 --model-arch X -- <flags>``.

:func:`replay_command` does the work and returns the exit status; the Typer
command in :mod:`service.cli.main` only forwards to it::

    @app.command(context_settings={"allow_extra_args": True,
                                   "ignore_unknown_options": True})
    def replay(ctx: typer.Context,
               release: Annotated[str, typer.Option("--release", "-r")],
               hardware: Annotated[str | None, typer.Option()] = None,
               model_arch: Annotated[str | None, typer.Option()] = None,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
        \"\"\"Run the release's own argument validation on a declared machine.\"\"\"
        from ..replay.cli_replay import replay_command
        raise typer.Exit(replay_command(release, hardware, model_arch, ctx.args, as_json))

Exit status: 0 passed, 1 SGLang refused the flags (``raised`` or
``argparse_error``), 3 harness error (no verdict), 2 bad input.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from kb.errors import TriageError
from service.replay.harness import replay
from service.replay.results import ReplayResult
from service.settings import Settings

__all__ = ["EXIT_CODES", "render_replay", "replay_command"]

EXIT_CODES = {"passed": 0, "raised": 1, "argparse_error": 1, "harness_error": 3}
_SHOWN_FIELDS = (
    "tp_size", "dp_size", "ep_size", "attention_backend", "prefill_attention_backend",
    "decode_attention_backend", "moe_runner_backend", "moe_a2a_backend", "quantization",
    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "mem_fraction_static", "chunked_prefill_size",
    "cuda_graph_max_bs", "max_running_requests", "page_size", "kv_cache_dtype",
)  # fmt: skip


def render_replay(result: ReplayResult, console: Console) -> None:
    """A human-readable report of one replay."""
    colour = {
        "passed": "green",
        "raised": "red",
        "argparse_error": "red",
        "harness_error": "yellow",
    }[result.status]
    machine = result.hardware or "this machine (no hardware declared)"
    console.print(
        f"[bold {colour}]{result.status}[/bold {colour}]  sglang {result.version} on "
        f"{machine}, model {result.model_arch or '(as given)'}"
        + ("  [dim](cached)[/dim]" if result.cached else "")
    )
    for note in result.substitutions:
        console.print(f"  [dim]{note}[/dim]", highlight=False, soft_wrap=True)
    if result.status == "raised":
        console.print(f"  {result.exception_type}: {result.message}", markup=False)
        for frame in result.frames:
            console.print(f"    {frame.where()}", markup=False, highlight=False)
            if frame.code:
                console.print(f"        {frame.code}", markup=False, highlight=False)
    elif result.status == "argparse_error":
        console.print(f"  argparse: {result.message}", markup=False)
    elif result.status == "harness_error":
        console.print(f"  not SGLang's verdict: {result.harness_reason}", markup=False)
        if result.raised_at:
            console.print(f"    raised at {result.raised_at.where()}", markup=False)
    elif result.server_args:
        for name in _SHOWN_FIELDS:
            if name in result.server_args:
                console.print(
                    f"  {name} = {result.server_args[name]!r}", markup=False, highlight=False
                )
    if result.probe_disagreements:
        console.print(f"  [yellow]probe disagreements: {result.probe_disagreements}[/yellow]")
    timing = ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items() if k.endswith("_s"))
    if timing:
        console.print(f"  [dim]{timing}[/dim]")


def replay_command(
    release: str,
    hardware: str | None,
    model_arch: str | None,
    flags: Sequence[str],
    as_json: bool,
    *,
    settings: Settings | None = None,
    timeout_s: float = 120,
) -> int:
    """Fetch (or reuse) ``release``, replay ``flags`` on it, print the outcome; the exit status."""
    from kb.sources import fetch_release

    out, err = Console(), Console(stderr=True)
    settings = settings or Settings()
    argv = list(flags)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        err.print("nothing to replay: give the server flags after --")
        return 2
    try:
        source = fetch_release(
            release,
            wheel_dir=settings.wheel_dir,
            source_dir=settings.source_dir,
            index_url=settings.pip_index_url,
        )
        result = replay(
            source.root,
            release,
            argv,
            hardware=hardware,
            model_arch=model_arch,
            timeout_s=timeout_s,
            settings=settings,
        )
    except TriageError as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        return 2
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        render_replay(result, out)
    return EXIT_CODES[result.status]
