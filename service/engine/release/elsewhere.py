"""Releases the KB has not ingested that fit the log: the atlas's answer (:mod:`kb.atlas`).

Release resolution weighs the *ingested* releases (:mod:`.fingerprint`, :mod:`.range`).
When none of them explains the log, the atlas of every release on the package index may:

* :func:`frames_elsewhere`: a traceback whose printed source lines are, at their reported
  numbers, the lines of releases not ingested (each frame's file content is looked up per
  release; a frame scores its function and its exact line as the fingerprint does). Only
  releases that match every printed line count.
* :func:`message_elsewhere`: a message without frames whose template is raised, with the
  message's exception type, by releases not ingested, clearly better than by any ingested
  release (templates matched as :mod:`service.engine.locate.message` matches the KB's).

Either gives an :class:`ElsewhereFit`: the releases, the one to ingest (``wanted``, the
newest of them), and the evidence. The answer says it; on-demand ingest fetches
``wanted`` without a hint in the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from kb.atlas import Atlas, line_hash
from kb.store import Store
from kb.versions import sorted_versions
from service.engine.locate.message import (
    MAX_MESSAGE_CHARS,
    MESSAGE_MIN,
    IndexRow,
    MessageIndex,
    build_index,
    match_in,
    normalise,
    split_exception_prefix,
)
from service.engine.release.fingerprint import W_FUNCTION, W_LINE, FrameRef

__all__ = ["ElsewhereFit", "atlas_of", "frames_elsewhere", "message_elsewhere"]

#: A release not ingested must beat the best ingested match of a message by this much.
MESSAGE_MARGIN = 0.1
#: Releases whose template match is within this of the best match it equally well.
_TIE = 0.02


class ElsewhereFit(BaseModel):
    """Releases not ingested that explain the log (from the atlas), oldest first."""

    releases: list[str]
    basis: Literal["frames", "message"]
    wanted: str  # the release to ingest to answer exactly: the newest of ``releases``
    score: float
    atlas_releases: int  # releases the atlas holds
    evidence: str


_lock = threading.Lock()
_atlases: dict[str, Atlas | None] = {}


def atlas_of(store: Store) -> Atlas | None:
    """The atlas beside ``store``'s index, or None when none was built (looked up once
    per KB file and then whenever the file appears)."""
    key = str(store.path)
    with _lock:
        hit = _atlases.get(key)
    if hit is None:
        hit = Atlas.beside(store.path)
        if hit is not None:
            with _lock:
                _atlases[key] = hit
    return hit


def frames_elsewhere(
    store: Store, frames: Sequence[FrameRef], ingested: Sequence[str]
) -> ElsewhereFit | None:
    """The releases not ingested that hold every printed frame line at its reported
    number (None when there are none, no frame printed a line, or no atlas is built)."""
    atlas = atlas_of(store)
    printed = [f for f in frames if f.text]
    if atlas is None or not printed:
        return None
    skip = set(ingested)
    score: dict[str, float] = {}
    exact: dict[str, int] = {}
    for f in printed:
        want = line_hash(f.text or "")
        for blob, versions in atlas.blobs_of(f.path).items():
            facts = atlas.facts(blob)
            if facts is None:
                continue
            line_ok = facts.line(f.line) == want
            fn_ok = f.function is None or any(g.name == f.function for g in facts.enclosing(f.line))
            points = W_LINE * line_ok + W_FUNCTION * fn_ok
            for v in versions:
                if v in skip:
                    continue
                score[v] = score.get(v, 0.0) + points
                exact[v] = exact.get(v, 0) + int(line_ok)
    fits = [v for v, n in exact.items() if n == len(printed)]
    if not fits:
        return None
    best = max(score[v] for v in fits)
    fits = sorted_versions([v for v in fits if score[v] == best])
    span = _span(fits)
    return ElsewhereFit(
        releases=fits,
        basis="frames",
        wanted=fits[-1],
        score=round(best / ((W_LINE + W_FUNCTION) * len(printed)), 3),
        atlas_releases=len(atlas.releases()),
        evidence=(
            f"the traceback's {len(printed)} printed line(s) are {span}'s lines at those "
            "numbers (the atlas of every release); not ingested"
        ),
    )


def _span(fits: list[str]) -> str:
    """``fits`` (sorted) in a few words: one release, or the first … the last (how many)."""
    return fits[0] if len(fits) == 1 else f"{fits[0]} … {fits[-1]} ({len(fits)} releases)"


@dataclass
class _Built:
    """The message index of one atlas state, and when it was built."""

    stamp: tuple[int, float]
    at: float
    index: MessageIndex
    messages: list[tuple[str, str | None]]


_built: dict[str, _Built] = {}
#: While the atlas fills (a release every few seconds), its message index is rebuilt at
#: most this often: a frameless log is matched against an index at most this far behind.
REBUILD_EVERY_S = 60.0


def _message_index(atlas: Atlas) -> tuple[MessageIndex, list[tuple[str, str | None]]]:
    """The atlas's distinct messages as one template index (a row's ``check_id`` is the
    message's position in the list): built once per atlas state, and while the atlas
    changes, at most once per :data:`REBUILD_EVERY_S`."""
    path, stamp, now = str(atlas.path), atlas.stamp(), time.monotonic()
    with _lock:
        hit = _built.get(path)
    if hit is not None and (hit.stamp == stamp or now - hit.at < REBUILD_EVERY_S):
        return hit.index, hit.messages
    messages = atlas.messages()
    rows = (
        (src, IndexRow(i, "", "", "assert" if exc == "AssertionError" else "raise", exc, 0, 0))
        for i, (src, exc) in enumerate(messages)
    )
    hit = _Built(stamp, now, build_index(rows), messages)
    with _lock:
        _built[path] = hit
    return hit.index, hit.messages


def message_elsewhere(
    store: Store,
    message: str,
    exc_type: str | None,
    ingested: Sequence[str],
    best_ingested: float,
) -> ElsewhereFit | None:
    """The releases not ingested that raise a template matching ``message`` clearly
    better (by :data:`MESSAGE_MARGIN`) than ``best_ingested``, the best score of any
    ingested release; None when there are none or no atlas is built."""
    atlas = atlas_of(store)
    if atlas is None or best_ingested + MESSAGE_MARGIN > 1.0:
        return None
    text = message[:MAX_MESSAGE_CHARS]
    prefix_type, rest = split_exception_prefix(text.lstrip())
    if prefix_type is not None:
        text, exc_type = rest, exc_type or prefix_type
    index, messages = _message_index(atlas)
    found = match_in(index, "", normalise(text), exc_type, limit=20)
    found = [m for m in found if m.score >= max(MESSAGE_MIN, best_ingested + MESSAGE_MARGIN)]
    if not found:
        return None
    top = found[0].score
    skip = set(ingested)
    where: dict[str, tuple[str, int]] = {}
    for m in found:
        if m.score < top - _TIE:
            break
        src, exc = messages[m.check_id]
        for version, path, line, _end in atlas.raised_at(src, exc):
            if version not in skip:
                where.setdefault(version, (path, line))
    if not where:
        return None
    fits = sorted_versions(list(where))
    path, line = where[fits[-1]]
    span = _span(fits)
    return ElsewhereFit(
        releases=fits,
        basis="message",
        wanted=fits[-1],
        score=round(top, 3),
        atlas_releases=len(atlas.releases()),
        evidence=(
            f"the message matches a raise of {span}, not ingested (in {fits[-1]}: "
            f"{path}:{line}; the atlas of every release)"
        ),
    )
