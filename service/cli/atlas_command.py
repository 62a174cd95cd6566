"""``sglang-triage atlas``: the light index of every release (:mod:`kb.atlas`), so that a
traceback or a message from a release the KB has not ingested is recognised (and that
release ingested on demand) without any hint in the log."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from service.cli.console import console, out
from service.cli.console import settings as load_settings

__all__ = ["atlas"]


def atlas(
    release: Annotated[
        list[str] | None,
        typer.Option("--release", "-r", help="A release to add; repeatable."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Every release the package index lists from this version on."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Add releases to the atlas: every file's line hashes, functions and raise messages
    (a few MB a release; wheels not cached before are deleted again)."""
    from ingest.acquire.pypi_index import list_releases
    from ingest.atlas import fill_atlas
    from kb.atlas import ATLAS_FILE, Atlas

    settings = load_settings()
    versions = list(release or [])
    if since:
        versions += [r.version for r in list_releases(settings.pip_index_url, since=since).releases]
    if not versions:
        console.print("nothing to add: give --release or --since")
        raise typer.Exit(2)
    atlas_db = Atlas(settings.kb_path / ATLAS_FILE)

    def told(version: str, what: str) -> None:
        console.print(f"{version}: {what}")

    done = fill_atlas(atlas_db, settings, versions, on_release=None if as_json else told)
    size = (settings.kb_path / ATLAS_FILE).stat().st_size
    summary = {
        "added": done.added,
        "present": done.present,
        "skipped": done.skipped,
        "seconds": round(done.seconds, 1),
        "releases": len(atlas_db.releases()),
        "bytes": size,
    }
    if as_json:
        out.print_json(json.dumps(summary))
    else:
        console.print(
            f"atlas: {summary['releases']} releases, {size / 1e6:.1f} MB; added "
            f"{len(done.added)}, skipped {len(done.skipped)} in {done.seconds:.0f} s"
        )
