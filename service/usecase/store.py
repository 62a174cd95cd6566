"""Storing an answer: a new id, the record, ``similar``, the background replay.

What the front ends that keep their answers (the API and the web page through it, the
Slack bot) do after :meth:`~service.usecase.TriageUseCase.answer`, through
:meth:`~service.usecase.TriageUseCase.answer_and_store`:

* the answer gets a new id (:func:`kb.records.new_triage_id`) and, when the KB's vector
  store is unreachable, says that search fell back to keywords;
* ``similar``: confirmed past triages that failed in the same function, an entry's ``id``
  only where :attr:`Keep.show_id` allows it;
* when the records' disk is nearly full the answer is returned unstored, and says why
  (:func:`service.usecase.storage.disk_refusal`);
* the record (the request's options, the redacted log, :attr:`Keep.record`) is stored,
  owned by :attr:`Keep.owner`, before the replay starts: a replay answered from its cache
  may finish (and store its verdicts) at once, and must not be overwritten by the
  "pending" record;
* the background replay of the located check and the fixes runs on this process's queue,
  or, with a durable queue (:func:`~service.wiring.jobs_for`: ``TRIAGE_DATABASE_URL`` or
  ``TRIAGE_REPLAY_QUEUE=database``), is queued for ``sglang-triage replay-worker``, which
  stores the same verdicts in the same record;
* the retention limits are applied as records are stored
  (:data:`service.usecase.storage.retention`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kb.knowledge import KnowledgeBase
from kb.records import Records
from service.engine import SimilarTriage, TriageResult, redact, redact_payload
from service.ondemand import ingesting
from service.settings import Settings
from service.usecase.storage import disk_refusal
from service.wiring import jobs_for, vectors_ok

__all__ = ["MAX_STORED_LOG", "Keep", "Stored", "request_record", "store_answer"]

#: The most characters of the log kept in a stored triage's request.
MAX_STORED_LOG = 200_000


def _no_ids(owner: str | None) -> bool:
    return False


@dataclass(frozen=True)
class Keep:
    """How a front end keeps its answers.

    ``owner`` owns the record (``key:<hash>``, ``client:<address>``, ``slack:<user>``);
    ``show_id(owner)`` says whether a ``similar`` entry of that owner's triage may carry its
    id (default: never); ``record`` holds more fields of the stored request (the Slack bot's
    ``source`` and ``slack``); ``replay_client`` is whose share of the replay queue the
    background replay takes; ``late_updates``: while a release is ingested on demand, answer
    at once from the nearest release and store the new answer when the ingest lands (the
    API), else wait for the ingest (the Slack bot, whose posted answer cannot change).
    """

    owner: str | None
    show_id: Callable[[str | None], bool] = _no_ids
    record: dict[str, Any] = field(default_factory=dict)
    replay_client: str = "local"
    late_updates: bool = True


@dataclass
class Stored:
    """An answer kept: ``result`` (its ``id`` is ``tid``, or None when it was not stored),
    ``encoded`` (its JSON, as stored and returned), ``stored`` (False: the records' disk is
    nearly full) and the redacted ``payload`` it answers."""

    result: TriageResult
    tid: str
    encoded: str
    stored: bool
    payload: str | bytes | dict[str, Any]


def request_record(
    payload: str | bytes | dict[str, Any], options: dict[str, str | None], keep: Keep
) -> dict[str, Any]:
    """The stored request: its ``options``, the redacted log (at most
    :data:`MAX_STORED_LOG` characters) and the front end's :attr:`Keep.record`."""
    log = payload.get("log") if isinstance(payload, dict) else payload
    if isinstance(log, bytes):
        log = log.decode("utf-8", errors="replace")
    text = log if isinstance(log, str) else ""
    return {"options": options, "log": redact(text)[:MAX_STORED_LOG], **keep.record}


def store_answer(
    result: TriageResult,
    tid: str,
    record: dict[str, Any],
    *,
    records: Records,
    settings: Settings,
    kb: KnowledgeBase,
    keep: Keep,
    replay: bool,
) -> tuple[str, bool, int]:
    """Give ``result`` the id ``tid``, ``similar`` and its notes, store it with ``record``
    and schedule its background replay (see the module doc). ``(encoded answer, stored,
    bytes stored)``; the caller applies the retention limits."""
    result.id = tid
    if not vectors_ok(kb):
        result.degraded.append("vector store unreachable: search falls back to keywords")
    if result.location is not None:
        similar = records.similar(
            result.location.path, result.location.function, exclude=tid, show_id=keep.show_id
        )
        # notes stored before they were redacted
        result.similar = [SimilarTriage.model_validate(s) for s in redact_payload(similar)]
    refused = disk_refusal(records, settings)
    if refused:
        result.id = None
        result.degraded.append(refused)
    wants_replay = (
        replay
        and result.status == "located"
        and settings.replay_enabled
        and not refused
        and not ingesting(result)
    )
    if wants_replay:
        result.replay = {
            "status": "pending",
            "detail": f"GET /triage/{tid} shows the replay verdicts when done",
        }
    encoded = result.model_dump_json()
    if refused:
        return encoded, False, 0
    nbytes = records.save(tid, record, encoded, owner=keep.owner)  # before the replay starts
    if wants_replay:
        _schedule_replay(result, tid, record, encoded, records, settings, keep.replay_client)
        if result.replay.get("status") != "pending":
            encoded = result.model_dump_json()
            records.save(tid, record, encoded)
    return encoded, True, nbytes


def _schedule_replay(
    result: TriageResult,
    tid: str,
    record: dict[str, Any],
    encoded: str,
    records: Records,
    settings: Settings,
    client: str,
) -> None:
    """Queue the background replay of stored triage ``tid``; when it cannot be queued,
    ``result.replay`` says why (``unverified``: the queue is full; ``unavailable``)."""
    from service.replay.background import schedule, unavailable_reason
    from service.replay.queue import QueueFull

    jobs = jobs_for(settings, records)  # None: replay runs in this process
    argv = list(result.parsed.command or [])
    try:
        if jobs is not None:  # a durable job for `sglang-triage replay-worker`
            fut = jobs.enqueue_triage(
                tid,
                json.loads(encoded),
                argv,
                result.parsed.hardware,
                result.parsed.model_arch,
                client=client,
            )
        else:
            fut = schedule(
                settings,
                json.loads(encoded),
                argv,
                result.parsed.hardware,
                result.parsed.model_arch,
                lambda updated: records.save(tid, record, updated),
                client=client,
            )
    except QueueFull as exc:
        result.replay = {"status": "unverified", "detail": f"{exc.message}; try again later"}
        return
    if fut is None:
        release = result.release.release
        why = (
            jobs.unavailable_reason(release, argv)
            if jobs is not None
            else unavailable_reason(settings, release, argv)
        )
        result.replay = {"status": "unavailable", "detail": why or "replay could not be scheduled"}
