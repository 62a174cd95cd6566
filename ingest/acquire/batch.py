"""``ingest --all``: every release the index offers, oldest first, with what was skipped and why.

:func:`ingest_all` lists the releases (:func:`~ingest.acquire.pypi_index.list_releases`,
at or after ``since``), then for each one, in order: fetches it
(:func:`~ingest.acquire.fetch.fetch_any`; the wheel cache makes a second run
cheap), skips it when it cannot be fetched or has no
``sglang/srt/server_args.py`` (the file every check of ours starts from), and
ingests it. Oldest first, so each release reuses the rows of the files its
predecessor left unchanged; a release already in the KB with the same content
hash is recognised as unchanged and left alone (``ingest`` is idempotent).

The default releases (``TRIAGE_RELEASES``, what ``--defaults`` ingests) get
embeddings in the requested scope; every other release is indexed
structurally only (scope ``none``): keyword search, checks, calls and the
catalog work for all of them. A release whose ingest fails with a
:class:`~kb.errors.TriageError` is reported as skipped and the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ingest.pipeline import ingest
from ingest.report import IngestReport, Progress
from kb.errors import AcquireError, TriageError
from kb.knowledge import KnowledgeBase
from kb.settings import KBSettings

from .fetch import fetch_any
from .pypi_index import Listing, Skip, list_releases

__all__ = ["SERVER_ARGS", "AllReport", "ingest_all", "scope_for"]

#: Package-relative path every ingested release must hold.
SERVER_ARGS = "srt/server_args.py"


@dataclass
class AllReport:
    """What ``ingest --all`` did: one report per ingested release, and the skipped ones."""

    since: str | None
    index_url: str
    listed: int = 0
    reports: list[IngestReport] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "index_url": self.index_url,
            "listed": self.listed,
            "seconds": round(self.seconds, 2),
            "releases": [r.as_dict() for r in self.reports],
            "skipped": [s.as_dict() for s in self.skipped],
        }


def scope_for(version: str, settings: KBSettings, scope: str) -> str:
    """``scope`` for a default release (``TRIAGE_RELEASES``), ``none`` for any other."""
    return scope if version in settings.releases else "none"


def ingest_all(
    kb: KnowledgeBase,
    settings: KBSettings,
    *,
    since: str | None = None,
    scope: str = "default",
    force: bool = False,
    progress_for: Callable[[str], Progress | None] | None = None,
    on_release: Callable[[IngestReport | Skip], None] | None = None,
    listing: Listing | None = None,
) -> AllReport:
    """Ingest every listed release from ``since`` on (see the module docstring).

    ``progress_for(version)`` gives the progress callback of one release's
    ingest; ``on_release`` is told of each report or skip as it happens.
    ``listing`` replaces the index query (the bench passes the one it made).
    """
    t0 = time.perf_counter()
    listing = listing or list_releases(settings.pip_index_url, since=since)
    result = AllReport(
        since,
        listing.index_url,
        listed=len(listing.releases) + len(listing.skipped),
        skipped=list(listing.skipped),
    )
    for skip in listing.skipped:
        if on_release:
            on_release(skip)
    for rel in listing.releases:
        outcome: IngestReport | Skip
        try:
            source = fetch_any(rel.version, settings)
        except AcquireError as exc:
            outcome = Skip(rel.version, f"cannot be fetched: {exc.message}")
        else:
            if not (source.package_dir / SERVER_ARGS).is_file():
                outcome = Skip(rel.version, f"no sglang/{SERVER_ARGS} in {source.origin}")
            else:
                try:
                    outcome = ingest(
                        kb,
                        source,
                        scope=scope_for(rel.version, settings, scope),
                        force=force,
                        progress=progress_for(rel.version) if progress_for else None,
                    )
                except TriageError as exc:
                    outcome = Skip(rel.version, f"ingest failed: {exc.message}")
        if isinstance(outcome, Skip):
            result.skipped.append(outcome)
        else:
            result.reports.append(outcome)
        if on_release:
            on_release(outcome)
    result.seconds = time.perf_counter() - t0
    return result
