"""On-demand ingest: answering for a release the KB does not hold yet, within bounds.

When a crash log names its release (the ``release`` sent, a ``pip`` pin, a ``check_env``
row, a ``dist-info`` path, a version string) and the KB lacks it, :class:`OnDemandIngest`
may have it indexed; each bound that refuses is a note in the answer, never an error. The
triage use case (:mod:`service.usecase`) reads :func:`wanted_release` from its one parse of
the log, calls :meth:`OnDemandIngest.ensure` and gives the answer the outcome with
:func:`annotate` (:func:`on_demand_parts`: the answer's release and caveat):

* **Listed releases only**: a version is fetched only when the package index lists it
  (:mod:`ingest.acquire.release_list`, asked at most once per
  ``TRIAGE_RELEASE_LIST_TTL_S``); any other is answered at once from the nearest ingested
  release and no pip runs. A dev build goes to git only with ``TRIAGE_SGLANG_GIT`` set.
* **One ingest at a time, in a child process** (``sglang-triage ingest --release X`` with
  the KB's settings, run by one worker thread): the download, the parse and their memory
  stay out of the server, which reads the release from the shared SQLite index once the
  child commits. At most :data:`MAX_QUEUED` releases wait behind it.
* **Answered at once**: from the nearest release, ``release.on_demand.status`` is
  ``ingesting`` with the caveat "ingesting X; this answer will update"; when the ingest
  lands the log is triaged again and ``on_update`` (the API's stored record, read by
  ``GET /triage/{id}`` and the ``/t/{id}`` page) gets the new answer. Callers without
  ``on_update`` (the CLI, the Slack bot, the bench) wait for the ingest instead.
* **Failures are remembered** for :data:`RETRY_AFTER_S`, checked under the lock that
  starts an ingest (no second pip run for a version that just failed), in a map of at most
  :data:`FAILED_MAX` versions.
* **Budgets**: ``TRIAGE_ON_DEMAND_PER_CLIENT_PER_HOUR`` new releases per client and
  ``TRIAGE_ON_DEMAND_GLOBAL_PER_HOUR`` in all; before each ingest the KB and caches must
  be under ``TRIAGE_DISK_QUOTA_GB``, least recently used on-demand releases evicted
  (:mod:`ingest.acquire.quota`; never a default release), else it is refused.

Nothing fetched is run (ingest parses source). :mod:`ingest` is imported on first use: the
base install (what API workers run) has no tree-sitter, and there on-demand ingest says it
needs the ``[ingest]`` extra.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from kb.knowledge import KnowledgeBase
from service.engine import (
    HINT_ORDER,
    ParsedLog,
    ReleaseInfo,
    TriageResult,
    elsewhere_release,
)

from .worker import (
    FAILED_MAX,
    MAX_QUEUED,
    MAX_WAITERS,
    NEEDS_INGEST_EXTRA,
    RETRY_AFTER_S,
    OnDemandIngest,
    OnDemandNote,
    child_env,
)

__all__ = [
    "FAILED_MAX",
    "MAX_QUEUED",
    "MAX_WAITERS",
    "NEEDS_INGEST_EXTRA",
    "RETRY_AFTER_S",
    "LateAnswer",
    "OnDemandIngest",
    "OnDemandNote",
    "OnDemandParts",
    "annotate",
    "child_env",
    "ingester_for",
    "ingesting",
    "on_demand_parts",
    "wanted_release",
]


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def wanted_release(
    parsed_input: tuple[ParsedLog, dict[str, Any]], release: str | None, kb: KnowledgeBase
) -> str | None:
    """The release the log says it ran, when the KB does not hold it; else None. A log
    that names no release may still be recognised by the atlas of every release
    (:func:`~service.engine.elsewhere_release`: its frames or its message).

    ``parsed_input`` is what :func:`~service.engine.parse_input` gave for the request (the
    caller parses once; this reads the parse). Only the most trusted hint counts (a
    ``release`` given with the request first): a weaker one naming a missing release while
    a stronger one names an ingested release is the engine's to weigh, not a reason to
    download.
    """
    parsed, extras = parsed_input
    named = release or extras.get("release")
    versions = [str(named)] if named else []
    order = {k: i for i, k in enumerate(HINT_ORDER)}
    versions += [
        h.version for h in sorted(parsed.release_hints, key=lambda h: order.get(h.kind, len(order)))
    ]
    if not versions:  # no hint: the atlas may still know the release (frames, message)
        return elsewhere_release(parsed, kb.store)
    if not _is_version(versions[0]):
        return None
    top = str(Version(versions[0])) if "+" not in versions[0] else versions[0]
    rel = kb.store.release(top)
    return None if rel is not None and rel["status"] in ("indexed", "complete") else top


@dataclass(frozen=True)
class OnDemandParts:
    """What on-demand ingest adds to one answer: its ``release`` with the note in
    ``on_demand`` (and, when the answer is about the release ingested for it, a line of
    ``evidence`` and the method ``on_demand``), and the ``degraded`` line that says the
    answer is a stand-in or from another release (None when it is not)."""

    release: ReleaseInfo
    degraded: str | None


def on_demand_parts(result: TriageResult, note: OnDemandNote) -> OnDemandParts:
    """The parts ``note`` gives ``result`` (see :class:`OnDemandParts`; ``result`` is left
    as it is): the method becomes ``on_demand`` when the answer is about the release
    ingested for it; otherwise the note is a caveat."""
    was = result.release
    if note.status == "ingested" and was.release == note.release:
        line = (
            f"{note.release} was ingested on demand ({note.seconds} s); then decided by "
            f"{was.method}"
        )
        release = was.model_copy(
            update={
                "on_demand": note.model_copy(),
                "evidence": [*was.evidence, line],
                "method": "on_demand",
            }
        )
        return OnDemandParts(release, None)
    release = was.model_copy(update={"on_demand": note.model_copy()})
    if note.status == "ingesting":
        then = "this answer will update" if "will update" in note.detail else "triage it again"
        return OnDemandParts(
            release,
            f"ingesting {note.release}; {then} (until then it is from {was.release}): {note.detail}",
        )
    caveat = (
        f"the log names {note.release}, which is not in the KB ({note.detail}); "
        f"this answer is from {was.release}. To answer from it: {note.how}"
    )
    return OnDemandParts(release, caveat)


def annotate(result: TriageResult, note: OnDemandNote | None) -> TriageResult:
    """``result`` with :func:`on_demand_parts` of ``note`` (a new answer; ``result`` itself
    when there is no note)."""
    if note is None:
        return result
    parts = on_demand_parts(result, note)
    degraded = [*result.degraded, parts.degraded] if parts.degraded else result.degraded
    return result.model_copy(update={"release": parts.release, "degraded": degraded})


def ingesting(result: TriageResult) -> bool:
    """Whether ``result`` is a stand-in answer while its release is being ingested."""
    on_demand = result.release.on_demand
    return isinstance(on_demand, OnDemandNote) and on_demand.status == "ingesting"


class LateAnswer:
    """Hands the answer re-triaged after an on-demand ingest to ``deliver``, but never
    before the front end has stored the first answer (:meth:`ready`): an ingest that lands
    at once must not be overwritten by the stand-in answer it replaces."""

    def __init__(self, deliver: Callable[[TriageResult], None]) -> None:
        self._deliver = deliver
        self._lock = threading.Lock()
        self._ready = False
        self._held: TriageResult | None = None

    def __call__(self, updated: TriageResult) -> None:
        with self._lock:
            if not self._ready:
                self._held = updated
                return
        self._deliver(updated)

    def ready(self) -> None:
        """The first answer is stored: deliver the update now if it already came."""
        with self._lock:
            self._ready = True
            held, self._held = self._held, None
        if held is not None:
            self._deliver(held)


_INGESTERS: weakref.WeakKeyDictionary[KnowledgeBase, OnDemandIngest] = weakref.WeakKeyDictionary()
_INGESTERS_LOCK = threading.Lock()


def ingester_for(kb: KnowledgeBase) -> OnDemandIngest:
    """The process-wide :class:`OnDemandIngest` of ``kb`` (one lock, one failure memory)."""
    with _INGESTERS_LOCK:
        found = _INGESTERS.get(kb)
        if found is None:
            found = _INGESTERS[kb] = OnDemandIngest(kb)
        return found
