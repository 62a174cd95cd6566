"""One crash log in, one answer out: the triage every front end runs.

:meth:`TriageUseCase.answer` is what the CLI, ``watch``/``run`` and the bench call, and the
first half of what the API and the Slack bot call (:meth:`TriageUseCase.answer_and_store`,
:mod:`service.usecase.store`):

1. **Parse once.** The payload is redacted once (:func:`~service.engine.redact_payload`) and
   parsed once (:func:`~service.engine.parse_input`); the engine gets that parse
   (``parsed_input``) and does not parse the log again.
2. **On-demand ingest.** When the log names a release the KB lacks
   (:func:`service.ondemand.wanted_release`), :class:`~service.ondemand.OnDemandIngest` may
   have it indexed, within its bounds. With ``on_update`` the answer comes at once, from the
   nearest ingested release (``release.on_demand.status`` ``ingesting``), and when the ingest
   lands the log is triaged again (from the same parse) and ``on_update(new answer)`` is
   called on the ingest's worker thread. Without it (the CLI, the Slack bot) the call waits
   for the ingest. ``client`` is whose budget a new ingest counts against.
3. **The engine** (:meth:`Engine.triage`).
4. **Fix search.** Unless the answer is a stand-in, when replay is on (``replay`` and
   ``replay_enabled``, ``fix_search_deadline_s`` > 0), the replay-backed fix search
   (:func:`service.replay.fix_search.search_fixes`) and the replay of the command on the release
   an upgrade answer names (:func:`service.replay.upgrade.verify_upgrade`), within one
   shared deadline.

The use case reaches :mod:`ingest` only through :mod:`service.ondemand`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kb.records import Records, new_triage_id
from service.engine import Engine, ParsedLog, TriageResult, parse_input, redact_payload
from service.ondemand import (
    LateAnswer,
    OnDemandNote,
    annotate,
    ingester_for,
    ingesting,
    wanted_release,
)
from service.settings import Settings
from service.usecase.storage import retention
from service.usecase.store import Keep, Stored, request_record, store_answer

__all__ = ["Payload", "TriageRequest", "TriageUseCase"]

log = logging.getLogger(__name__)

#: A crash log as a front end received it: text, bytes, or a structured report
#: ``{"log", "command"?, "release"?, "hardware"?, "model"?, "python"?}``.
Payload = str | bytes | dict[str, Any]


@dataclass(frozen=True)
class TriageRequest:
    """One crash log to triage and what the caller said about it.

    ``release``, ``hardware``, ``model`` and ``model_arch`` override what the log says;
    ``replay`` allows the replay-backed fix search (and, when stored, the background replay);
    ``client`` is whose on-demand ingest budget a new release counts against.
    """

    payload: Payload
    release: str | None = None
    hardware: str | None = None
    model: str | None = None
    model_arch: str | None = None
    replay: bool = True
    client: str = "local"

    def options(self) -> dict[str, str | None]:
        """The engine's options (also stored with the triage as the request's ``options``)."""
        return {
            "release": self.release,
            "hardware": self.hardware,
            "model": self.model,
            "model_arch": self.model_arch,
        }


class TriageUseCase:
    """The triage of one crash log over the shared wiring: an engine (and its KB), the
    settings, and, for front ends that store their answers, the records."""

    def __init__(self, engine: Engine, settings: Settings, records: Records | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.records = records

    def answer(
        self,
        request: TriageRequest,
        on_update: Callable[[TriageResult], None] | None = None,
    ) -> TriageResult:
        """The answer to ``request`` (nothing stored); see the module doc for the steps.
        Raises what parsing raises (empty, binary, too large, no crash found) and what the
        engine raises (an unknown release)."""
        payload = redact_payload(request.payload)  # once per request: the parse gets it
        return self._answer(replace(request, payload=payload), on_update)

    def _answer(
        self, request: TriageRequest, on_update: Callable[[TriageResult], None] | None
    ) -> TriageResult:
        """:meth:`answer` of a request whose payload is redacted already."""
        engine, settings = self.engine, self.settings
        limit = settings.max_body_bytes
        payload, options = request.payload, request.options()
        parsed_input = parse_input(payload, max_bytes=limit)  # the one parse of this request
        wanted = wanted_release(parsed_input, request.release, engine.kb)
        ingester = ingester_for(engine.kb)
        landed = None
        if wanted and on_update is not None:
            pristine = _copy(parsed_input)  # the parse as parsed, for the triage after ingest

            def landed(note: OnDemandNote) -> None:
                try:
                    again = engine.triage(
                        payload, **options, max_bytes=limit, parsed_input=pristine
                    )
                except Exception:  # the stand-in then, with the outcome: never "ingesting"
                    log.exception("triaging again after the ingest of %s", note.release)
                    again = result.model_copy(deep=True)
                    again.degraded = [d for d in again.degraded if not d.startswith("ingesting ")]
                again = annotate(again, note)
                ingester.touch(again.release.release)
                on_update(again)

        note = (
            ingester.ensure(
                wanted,
                settings,
                client=request.client,
                on_landed=landed,
                wait=on_update is None,
            )
            if wanted
            else None
        )
        result = engine.triage(payload, **options, max_bytes=limit, parsed_input=parsed_input)
        result = annotate(result, note)
        ingester.touch(result.release.release)
        if request.replay and not ingesting(result):
            result = self._search_fixes(result)
        return result

    def _search_fixes(self, result: TriageResult) -> TriageResult:
        """``result`` with the replay-backed fix search's parts (its fixes re-ranked, their
        summary, ``fix_search``) and the upgrade's verification, when replay is on, within
        one shared deadline (``fix_search_deadline_s``)."""
        settings = self.settings
        if not settings.replay_enabled or settings.fix_search_deadline_s <= 0:
            return result
        from service.replay.fix_search import find_fixes

        started = time.monotonic()
        found = find_fixes(
            result,
            settings,
            deadline_s=settings.fix_search_deadline_s,
            max_candidates=settings.fix_search_candidates,
            verify_clean=settings.fix_search_verify_clean,
        )
        if found is not None:
            result = found.applied_to(result)
        if result.upgrade_fix is not None:  # the named release's own validation judges it
            from service.replay.upgrade import verify_upgrade

            left = settings.fix_search_deadline_s - (time.monotonic() - started)
            # one shared deadline; on a copy, so the engine's answer stays as it returned
            result = verify_upgrade(
                result.model_copy(deep=True), settings, deadline_s=max(0.0, left)
            )
        return result

    def answer_and_store(self, request: TriageRequest, keep: Keep) -> Stored:
        """:meth:`answer`, kept under a new id in the records (:mod:`service.usecase.store`:
        ``similar``, the disk check, the background replay, the retention limits).

        The payload is redacted once, here: the parse and the stored record get the same
        text. With :attr:`Keep.late_updates`, an answer that is a stand-in while its release
        is ingested on demand is replaced in the record by the answer triaged again once
        the ingest lands, but never before the first answer is stored.
        """
        records = self.records
        if records is None:
            raise TypeError("answer_and_store needs the records (TriageUseCase(records=...))")
        request = replace(request, payload=redact_payload(request.payload))
        record = request_record(request.payload, request.options(), keep)
        tid = new_triage_id()

        def landed(updated: TriageResult) -> None:  # triaged again once its release is ingested
            updated.id = tid
            records.save(tid, record, updated.model_dump_json())

        late = LateAnswer(landed) if keep.late_updates else None  # delivers once stored
        result = self._answer(request, late)
        encoded, stored, nbytes = store_answer(
            result,
            tid,
            record,
            records=records,
            settings=self.settings,
            kb=self.engine.kb,
            keep=keep,
            replay=request.replay,
        )
        if stored:
            if late is not None:
                late.ready()
            retention.stored(records, self.settings, nbytes)
        return Stored(result, tid, encoded, stored, request.payload)


def _copy(parsed_input: tuple[ParsedLog, dict[str, Any]]) -> tuple[ParsedLog, dict[str, Any]]:
    parsed, extras = parsed_input
    return parsed.model_copy(deep=True), dict(extras)
