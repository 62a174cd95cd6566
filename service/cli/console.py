"""What every sub-command shares: the two consoles (messages on stderr, answers on stdout),
the settings (read from the environment) and the exit on a :class:`TriageError`."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

from kb.errors import TriageError
from service.settings import Settings

__all__ = ["console", "fail", "out", "settings"]

console = Console(stderr=True)
out = Console()


def settings() -> Settings:
    """The settings of this run, from the environment (``TRIAGE_*``)."""
    return Settings()


def fail(exc: TriageError) -> NoReturn:
    """Print ``exc``'s message and exit with status 2."""
    console.print(f"[red]error:[/red] {exc.message}")
    raise typer.Exit(2)
