"""Locating for the triage: search as the last resort, and what a doubtful location says.

* :func:`search_locate` — :func:`~service.engine.locate.localize.locate_by_search`
  memoised per release, exception and :class:`~service.engine.locate.scope.Scope`.
* :func:`doubt_unknowns` — a location whose cross-checks failed (the source line the
  log printed under the frame is not a line of the check, or the message does not fit
  the check's message template: confidence below :data:`TRUSTED`) becomes an entry of
  the answer's ``unknowns`` saying what did not match, not only a note in the text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from service.engine.answer import UnknownFact
from service.engine.cache import LRUCache, release_key
from service.engine.locate.localize import Located, locate_by_search
from service.engine.locate.scope import Scope
from service.engine.logparse.frames import ExceptionInfo

if TYPE_CHECKING:
    from kb.knowledge import KnowledgeBase
    from kb.search import SearchResult

__all__ = ["TRUSTED", "doubt_unknowns", "search_locate"]

TRUSTED = 0.8
"""Confidence from which a location is reported without a doubt entry."""
#: (release, vector store, exception, scope) -> where search located it (in a 1-tuple)
_SEARCH_LOCATED: LRUCache[tuple[Located | None]] = LRUCache("engine.search_locate", 1024)
#: words of the notes :mod:`~service.engine.locate.localize` writes when a cross-check fails
_MISMATCH = ("which is not a line of this check", "does not fit this check's message")


def search_locate(
    kb: KnowledgeBase,
    exc: ExceptionInfo,
    version: str,
    scope: Scope | None = None,
) -> Located | None:
    """Locate by hybrid search, memoised per release, exception (type and message) and scope.

    A result obtained while the vector store was unreachable is not kept, so
    search recovers with the store; a re-indexed release changes the key.
    """
    from kb.search import hybrid_search

    s = kb.settings
    key = (
        release_key(kb.store, version, "search-locate"),
        s.chroma_url,
        s.embedding_model,
        exc.type,
        exc.qualified_type,
        exc.message,
        scope.part if scope else None,
    )
    hit = _SEARCH_LOCATED.get(key)
    if hit is None:
        complete = True

        def search(query: str, release: str) -> SearchResult:
            nonlocal complete
            result = hybrid_search(kb, query, release, k=5)
            complete = complete and not (result.degraded or "").startswith("vector store")
            return result

        hit = (locate_by_search(exc, kb.store, version, search, scope),)
        if complete:
            _SEARCH_LOCATED.put(key, hit)
    located = hit[0]
    return (
        None
        if located is None
        else replace(located, alternatives=list(located.alternatives), notes=list(located.notes))
    )


def doubt_unknowns(located: Located, release: str) -> list[UnknownFact]:
    """One ``unknowns`` entry when a cross-check of the location failed (see the module
    docstring); none for a trusted location."""
    if located.confidence >= TRUSTED:
        return []
    failed = [n for n in located.notes if any(w in n for w in _MISMATCH)]
    if not failed:
        return []
    check = located.check
    return [
        UnknownFact(
            what="whether this check raised the crash",
            why=f"{check.path}:{check.start_line} in {release} was located by "
            f"{located.method}, but " + "; ".join(failed),
            settle="the exact release (`pip show sglang`) and the full traceback with its "
            "source lines",
        )
    ]
