"""On-demand ingest: answering for a release the KB does not hold yet.

When a crash log names its release (the ``release`` given with the request, a
``pip`` pin, a ``check_env`` row, a ``dist-info`` path, a version string) and
that release is not in the KB, :class:`OnDemandIngest` fetches it (the PyPI
wheel, cached; a dev build's commit from ``TRIAGE_SGLANG_GIT``), indexes its
structure right away and lets the engine answer from it; its embeddings are
computed afterwards on a background thread (until then search falls back to
keywords for it). The answer's ``release`` says so: ``method`` is
``on_demand``, ``on_demand`` holds the release, the status and the seconds
it took, and the method that then decided the release stays in the evidence.

Where the release cannot be fetched (offline, not on the index, no git URL
for a dev build) or on-demand ingest is off, the engine answers from the
nearest ingested release as before and ``on_demand`` says which release it
would need and the command that ingests it. A release that failed is not
tried again for :data:`RETRY_AFTER_S`, and one ingest runs at a time, so a
burst of logs naming releases costs one download at a time.

Only strings that parse as a version (PEP 440, or a dev build naming a
commit) are ever fetched: a log cannot make the service download anything
else, and nothing fetched is run (ingest parses source, it never imports it).

:mod:`ingest` is imported on first use, not with this module: the base install
(``pip install sglang-triage``, what API workers run) has no tree-sitter and no
torch, and there on-demand ingest says it needs the ``[ingest]`` extra.
"""

from __future__ import annotations

import importlib.util
import logging
import queue
import threading
import time
import weakref
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from kb.errors import TriageError
from kb.knowledge import KnowledgeBase
from service.engine import HINT_ORDER, Engine, TriageResult, parse_input
from service.settings import Settings

__all__ = ["NEEDS_INGEST_EXTRA", "RETRY_AFTER_S", "OnDemandIngest", "OnDemandNote", "annotate",
           "ingester_for", "triage", "wanted_release"]

log = logging.getLogger(__name__)

#: A release that could not be fetched is not tried again for this long.
RETRY_AFTER_S = 600.0
#: What to install where :mod:`ingest`'s dependencies (tree-sitter, ...) are missing.
NEEDS_INGEST_EXTRA = "on-demand ingest needs the [ingest] extra (pip install 'sglang-triage[ingest]')"


def _missing_ingest() -> str | None:
    """Why :mod:`ingest` cannot be imported in this install (None when it can)."""
    try:
        import ingest.acquire  # noqa: F401
        import ingest.pipeline  # noqa: F401
    except ImportError as exc:
        return f"{NEEDS_INGEST_EXTRA}: {exc.name or exc} is not installed"
    return None


def _can_embed() -> bool:
    """Whether this install can compute embeddings (sentence-transformers, the [ingest] extra)."""
    return importlib.util.find_spec("sentence_transformers") is not None


class OnDemandNote(BaseModel):
    """What on-demand ingest did for one answer (``release.on_demand``)."""

    release: str
    status: Literal["ingested", "unavailable", "disabled"]
    seconds: float | None = None
    detail: str
    how: str  # the command that ingests it by hand


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def wanted_release(payload: str | bytes | dict[str, Any], release: str | None,
                   kb: KnowledgeBase, *, max_bytes: int) -> str | None:
    """The release the log says it ran, when the KB does not hold it; else None.

    Only the most trusted hint counts (a ``release`` given with the request
    first): a weaker one naming a missing release while a stronger one names
    an ingested release is the engine's to weigh, not a reason to download.
    Raises what parsing raises (empty, binary, too large, no crash found).
    """
    parsed, extras = parse_input(payload, max_bytes=max_bytes)
    named = release or extras.get("release")
    versions = [str(named)] if named else []
    order = {k: i for i, k in enumerate(HINT_ORDER)}
    versions += [h.version for h in sorted(parsed.release_hints,
                                           key=lambda h: order.get(h.kind, len(order)))]
    if not versions or not _is_version(versions[0]):
        return None
    top = str(Version(versions[0])) if "+" not in versions[0] else versions[0]
    rel = kb.store.release(top)
    return None if rel is not None and rel["status"] in ("indexed", "complete") else top


class OnDemandIngest:
    """Fetches and indexes missing releases of one KB for the front ends, one at a time.

    It holds what must be shared per KB (the lock, the memory of failures, the embedding
    thread); the settings are each caller's, so a front end with on-demand ingest off never
    ingests through an instance another front end made."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self._lock = threading.Lock()
        self._failed: dict[str, tuple[float, str]] = {}
        self._to_embed: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._embedder: threading.Thread | None = None

    def ensure(self, version: str, settings: Settings) -> OnDemandNote:
        """Make ``version`` answerable (its structural index), or say why it is not."""
        how = f"sglang-triage ingest --release {version}"
        if not settings.on_demand_ingest:
            return OnDemandNote(release=version, status="disabled", how=how,
                                detail="on-demand ingest is off (TRIAGE_ON_DEMAND_INGEST)")
        missing = _missing_ingest()
        if missing:
            return OnDemandNote(release=version, status="disabled", how=how, detail=missing)
        from ingest.acquire import fetch_any
        from ingest.pipeline import index_structure

        failed = self._failed.get(version)
        if failed and time.monotonic() - failed[0] < RETRY_AFTER_S:
            return OnDemandNote(release=version, status="unavailable", how=how, detail=failed[1])
        with self._lock:
            t0 = time.perf_counter()
            rel = self.kb.store.release(version)
            if rel is not None and rel["status"] in ("indexed", "complete"):  # done meanwhile
                return OnDemandNote(release=version, status="ingested", seconds=0.0, how=how,
                                    detail="indexed by another request just before this one")
            try:
                source = fetch_any(version, settings)
                report = index_structure(self.kb, source)
            except TriageError as exc:
                detail = f"could not fetch or index {version}: {exc.message}"
                self._failed[version] = (time.monotonic(), detail)
                return OnDemandNote(release=version, status="unavailable", how=how, detail=detail)
            seconds = round(time.perf_counter() - t0, 2)
        embeds = settings.on_demand_embed and _can_embed()
        if embeds:
            self._queue_embeddings(version, report)
        why_not = ("TRIAGE_ON_DEMAND_EMBED is off" if not settings.on_demand_embed else
                   "sentence-transformers is not installed: the [ingest] extra")
        return OnDemandNote(
            release=version, status="ingested", seconds=seconds, how=how,
            detail=f"indexed on demand in {seconds:.1f} s: {report.files} files "
                   f"({report.parsed} parsed, {report.reused_files} already known); " +
                   ("embeddings follow in the background" if embeds else
                    f"no embeddings ({why_not}): search uses keywords"))

    def _queue_embeddings(self, version: str, report: Any) -> None:  # noqa: ANN401
        """Embed on one daemon thread, release after release: a process that exits
        meanwhile loses only vectors, which the next ``ingest`` computes."""
        self._to_embed.put((version, report))
        if self._embedder is None or not self._embedder.is_alive():
            self._embedder = threading.Thread(target=self._embed_loop, daemon=True,
                                              name="on-demand-embed")
            self._embedder.start()

    def _embed_loop(self) -> None:
        from ingest.pipeline import embed_release

        while True:
            try:
                version, report = self._to_embed.get(timeout=60)
            except queue.Empty:
                return
            try:
                embed_release(self.kb, version, "default", report)
            except Exception:  # the structural index answers meanwhile; log and go on
                log.exception("on-demand embeddings of %s failed", version)


def annotate(result: TriageResult, note: OnDemandNote | None) -> None:
    """Write ``note`` into ``result.release``: the method becomes ``on_demand`` when the
    answer is about the release ingested for it; otherwise the note is a caveat."""
    if note is None:
        return
    rel = result.release
    rel["on_demand"] = note.model_dump()
    if note.status == "ingested" and rel.get("release") == note.release:
        rel.setdefault("evidence", []).append(
            f"{note.release} was ingested on demand ({note.seconds} s); then decided by "
            f"{rel.get('method')}")
        rel["method"] = "on_demand"
    else:
        caveat = (f"the log names {note.release}, which is not in the KB ({note.detail}); "
                  f"this answer is from {rel.get('release')}. To answer from it: {note.how}")
        result.degraded.append(caveat)


_INGESTERS: weakref.WeakKeyDictionary[KnowledgeBase, OnDemandIngest] = weakref.WeakKeyDictionary()
_INGESTERS_LOCK = threading.Lock()


def ingester_for(kb: KnowledgeBase) -> OnDemandIngest:
    """The process-wide :class:`OnDemandIngest` of ``kb`` (one lock, one failure memory)."""
    with _INGESTERS_LOCK:
        found = _INGESTERS.get(kb)
        if found is None:
            found = _INGESTERS[kb] = OnDemandIngest(kb)
        return found


def triage(engine: Engine, settings: Settings, payload: str | bytes | dict[str, Any], *,
           release: str | None = None, hardware: str | None = None, model: str | None = None,
           model_arch: str | None = None, replay: bool = True) -> TriageResult:
    """:meth:`Engine.triage`, after ingesting the release the log names when the KB lacks
    it (what every front end calls); then, when static evaluation left the check or a fix
    undecided and replay is on (``replay`` and ``replay_enabled``), the replay-backed fix search
    (:func:`service.replay.search.search_fixes`, within ``fix_search_deadline_s``)."""
    limit = settings.max_body_bytes
    wanted = wanted_release(payload, release, engine.kb, max_bytes=limit)
    note = ingester_for(engine.kb).ensure(wanted, settings) if wanted else None
    result = engine.triage(payload, release=release, hardware=hardware, model=model,
                           model_arch=model_arch, max_bytes=limit)
    annotate(result, note)
    if replay and settings.replay_enabled and settings.fix_search_deadline_s > 0:
        from service.replay.search import search_fixes

        search_fixes(result, settings, deadline_s=settings.fix_search_deadline_s,
                     max_candidates=settings.fix_search_candidates,
                     verify_clean=settings.fix_search_verify_clean)
    return result
