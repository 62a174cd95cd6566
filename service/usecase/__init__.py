"""The use cases the front ends share: the triage of one crash log.

:class:`TriageUseCase` holds the wiring (an engine and its KB, the settings, the records);
the API, the web page (through the API), the Slack bot, the CLI and ``watch``/``run`` send
it a :class:`TriageRequest`. :meth:`TriageUseCase.answer` parses the log once, ingests the
release it names on demand, runs the engine and the replay-backed fix search
(:mod:`service.usecase.triage`); :meth:`TriageUseCase.answer_and_store` also keeps the
answer under a new id as :class:`Keep` says, with ``similar`` and the background replay
(:mod:`service.usecase.store`), within the records' bounds (:mod:`service.usecase.storage`).
"""

from __future__ import annotations

from service.usecase.store import Keep, Stored
from service.usecase.triage import Payload, TriageRequest, TriageUseCase

__all__ = ["Keep", "Payload", "Stored", "TriageRequest", "TriageUseCase"]
