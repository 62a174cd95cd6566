"""On-demand ingest: answering for a release the KB does not hold yet, within bounds.

When a crash log names its release (the ``release`` sent, a ``pip`` pin, a ``check_env``
row, a ``dist-info`` path, a version string) and the KB lacks it, :class:`OnDemandIngest`
may have it indexed; each bound that refuses is a note in the answer, never an error:

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

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from packaging.version import InvalidVersion, Version

from kb.knowledge import KnowledgeBase
from service.engine import HINT_ORDER, Engine, TriageResult, parse_input, redact_payload
from service.settings import Settings

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
    "annotate",
    "child_env",
    "ingester_for",
    "ingesting",
    "triage",
    "wanted_release",
]


log = logging.getLogger(__name__)


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def wanted_release(
    payload: str | bytes | dict[str, Any], release: str | None, kb: KnowledgeBase, *, max_bytes: int
) -> str | None:
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
    versions += [
        h.version for h in sorted(parsed.release_hints, key=lambda h: order.get(h.kind, len(order)))
    ]
    if not versions or not _is_version(versions[0]):
        return None
    top = str(Version(versions[0])) if "+" not in versions[0] else versions[0]
    rel = kb.store.release(top)
    return None if rel is not None and rel["status"] in ("indexed", "complete") else top


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
            f"{rel.get('method')}"
        )
        rel["method"] = "on_demand"
    elif note.status == "ingesting":
        then = "this answer will update" if "will update" in note.detail else "triage it again"
        result.degraded.append(
            f"ingesting {note.release}; {then} (until then it is from "
            f"{rel.get('release')}): {note.detail}"
        )
    else:
        caveat = (
            f"the log names {note.release}, which is not in the KB ({note.detail}); "
            f"this answer is from {rel.get('release')}. To answer from it: {note.how}"
        )
        result.degraded.append(caveat)


def ingesting(result: TriageResult) -> bool:
    """Whether ``result`` is a stand-in answer while its release is being ingested."""
    return (result.release.get("on_demand") or {}).get("status") == "ingesting"


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


def triage(
    engine: Engine,
    settings: Settings,
    payload: str | bytes | dict[str, Any],
    *,
    release: str | None = None,
    hardware: str | None = None,
    model: str | None = None,
    model_arch: str | None = None,
    replay: bool = True,
    client: str = "local",
    on_update: Callable[[TriageResult], None] | None = None,
) -> TriageResult:
    """:meth:`Engine.triage`, with the release the log names ingested on demand when the KB
    lacks it (what every front end calls).

    With ``on_update`` the answer comes at once: while the release is being ingested it is
    from the nearest ingested release (``release.on_demand.status`` ``ingesting``), and
    when the ingest lands the log is triaged again and ``on_update(new answer)`` is called
    on the ingest's worker thread. Without it (the CLI, the Slack bot) the call waits for
    the ingest. ``client`` is whose budget a new ingest counts against. Then, unless the
    answer is a stand-in, when static evaluation left the check or a fix undecided and
    replay is on (``replay`` and ``replay_enabled``), the replay-backed fix search
    (:func:`service.replay.search.search_fixes`, within ``fix_search_deadline_s``), and
    the replay of the command on the release an upgrade answer names
    (:func:`service.replay.upgrade.verify_upgrade`)."""
    limit = settings.max_body_bytes
    options = {"release": release, "hardware": hardware, "model": model, "model_arch": model_arch}
    payload = redact_payload(payload)  # once per request: every parse below gets Redacted text
    wanted = wanted_release(payload, release, engine.kb, max_bytes=limit)
    ingester = ingester_for(engine.kb)
    landed = None
    if wanted and on_update is not None:

        def landed(note: OnDemandNote) -> None:
            try:
                again = engine.triage(payload, **options, max_bytes=limit)
            except Exception:  # the stand-in then, with the outcome: never "ingesting" forever
                log.exception("triaging again after the ingest of %s", note.release)
                again = result.model_copy(deep=True)
                again.degraded = [d for d in again.degraded if not d.startswith("ingesting ")]
            annotate(again, note)
            ingester.touch(again.release.get("release"))
            on_update(again)

    note = (
        ingester.ensure(wanted, settings, client=client, on_landed=landed, wait=on_update is None)
        if wanted
        else None
    )
    result = engine.triage(payload, **options, max_bytes=limit)
    annotate(result, note)
    ingester.touch(result.release.get("release"))
    if (
        replay
        and settings.replay_enabled
        and settings.fix_search_deadline_s > 0
        and not ingesting(result)
    ):
        from service.replay.search import search_fixes

        started = time.monotonic()
        search_fixes(
            result,
            settings,
            deadline_s=settings.fix_search_deadline_s,
            max_candidates=settings.fix_search_candidates,
            verify_clean=settings.fix_search_verify_clean,
        )
        if result.upgrade_fix is not None:  # the named release's own validation judges it
            from service.replay.upgrade import verify_upgrade

            left = settings.fix_search_deadline_s - (time.monotonic() - started)
            verify_upgrade(result, settings, deadline_s=max(0.0, left))  # one shared deadline
    return result
