"""Localization: from the innermost SGLang frame to the check that fired.

In order of preference:

1. **frame_line** — the check (of the exception's kind) whose statement spans
   the reported line, after mapping the line onto the release (dev builds are
   offset). Python 3.10/3.11 report a multi-line assert at the last line of
   its test, 3.12 at the ``assert`` line and 3.13 at the first line of the
   test; all fall inside the statement's span. The answer is cross-checked
   before it is trusted: the source line the log printed under the frame must
   be a line of that check, and the exception's message must fit the check's
   message template. When the printed line is not in the check but is in
   another check of the same kind nearby (the line offset is off), that check
   is taken instead (**frame_source**); when either cross-check fails and no
   such check exists, the location stands with a low confidence and says why.
2. **function_kind** — lines drifted: among the checks of the reported
   function, those of the same kind and bareness (a bare ``AssertionError``
   narrows to bare asserts); those holding the printed source line first, then
   the one nearest the mapped line wins, and the others are listed as
   alternatives. The same two cross-checks apply: a printed line no candidate
   holds, or a message that does not fit, lowers the confidence to 0.5.
3. **message** — no usable frames: the exception message is matched against
   the checks' message templates (:mod:`service.engine.locate.message`).
4. **search** — last resort: hybrid search over the message.

Message and search candidates are kept inside the part of SGLang the launch ran
(:mod:`service.engine.locate.scope`: ``launch_server`` is the LLM server, not
``multimodal_gen``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kb.code_types import Check
from kb.store import Store
from service.engine.answer import LocateMethod
from service.engine.locate.scope import Scope
from service.engine.logparse.frames import ExceptionInfo, Frame

if TYPE_CHECKING:
    from kb.search import SearchResult

#: ``search(query, release)``: one release's hybrid search (:func:`kb.search.hybrid_search`).
Search = Callable[[str, str], "SearchResult"]


@dataclass
class Located:
    check: Check
    method: LocateMethod
    confidence: float
    reported_line: int | None = None
    alternatives: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _kind_matches(check: Check, exc: ExceptionInfo) -> bool:
    if exc.type == "AssertionError":
        return bool(check.kind == "assert" or check.exc_type == "AssertionError")
    if exc.type in ("<unknown>", ""):
        return True
    return check.kind == "raise" and (
        check.exc_type in (exc.type, None) or check.exc_type == exc.qualified_type
    )


def sglang_frames(exc: ExceptionInfo, store: Store, release: str) -> list[Frame]:
    """Frames inside the sglang package whose file exists in ``release`` (innermost last)."""
    paths = set()
    out = []
    for frame in exc.frames:
        if frame.package_path and frame.package_path.startswith("sglang/"):
            if frame.package_path not in paths:
                if store.file_text(release, frame.package_path) is None:
                    continue
                paths.add(frame.package_path)
            out.append(frame)
    return out


def locate_by_frames(
    exc: ExceptionInfo, store: Store, release: str, line_offsets: dict[str, int]
) -> Located | None:
    frames = sglang_frames(exc, store, release)
    if not frames:
        return None
    frame = frames[-1]
    path = frame.package_path or ""
    notes: list[str] = []
    mapped = None
    if frame.line is not None:
        mapped = frame.line - line_offsets.get(path, 0)
        if mapped != frame.line:
            notes.append(f"reported line {frame.line} maps to {mapped} in {release}")
        spanning = [
            c
            for c in store.checks(
                release,
                path=path,
                where="start_line <= ? AND end_line >= ?",
                params=(mapped, mapped),
            )
            if _kind_matches(c, exc)
        ]
        if exc.bare:
            spanning = [c for c in spanning if c.bare] or spanning
        if spanning:
            best = max(spanning, key=lambda c: c.start_line)  # innermost statement
            return _cross_checked(
                store, release, exc, frame, mapped, best, 0.97 if not notes else 0.9, notes
            )
    function = frame.function or ""
    candidates = [
        c
        for c in store.checks(release, path=path)
        if c.function.rsplit(".", 1)[-1] == function and _kind_matches(c, exc)
    ]
    if exc.bare:
        candidates = [c for c in candidates if c.bare]
    if not candidates:
        return None
    target = mapped if mapped is not None else candidates[0].start_line
    candidates.sort(key=lambda c: abs(c.start_line - target))
    source = _norm(frame.source)
    holding = [c for c in candidates if _source_in(store, release, c, source)] if source else []
    if holding:  # the printed line singles out the check(s) holding it
        candidates = holding + [c for c in candidates if c not in holding]
    n = len(holding) or len(candidates)
    conf = 0.85 if n == 1 else max(0.4, 0.8 - 0.1 * (n - 1))
    notes.append(
        f"line {frame.line} is not a {exc.type} check in {release}; located by function "
        f"{function} and check kind ({len(candidates)} candidate(s))"
    )
    if source and not holding:
        notes.append(
            f"the log prints `{source[:80]}` at line {frame.line}, which is not a "
            f"line of this check in {release}"
        )
        conf = min(conf, _CONTRADICTED)
    if _message_fits(store, release, candidates[0], exc) is False:
        notes.append(f"the message does not fit this check's message in {release}")
        conf = min(conf, _CONTRADICTED)
    return Located(candidates[0], "function_kind", conf, frame.line, candidates[1:4], notes)


def locate_by_message(
    exc: ExceptionInfo, store: Store, release: str, scope: Scope | None = None
) -> Located | None:
    """The check whose message template matches the message best; with a ``scope`` (the
    part of SGLang the launch ran), matches outside it are left out unless none is in it."""
    if not exc.message:
        return None
    from service.engine.locate.message import MESSAGE_MIN, match_message

    matches = match_message(
        store, release, exc.message, exc_type=exc.type, limit=4 if scope is None else 12
    )
    notes: list[str] = []
    if scope is not None:
        matches, said = scope.keep([m for m in matches if m.score >= MESSAGE_MIN])
        notes += [said] if said else []
    if not matches or matches[0].score < MESSAGE_MIN:
        return None
    rows = store.checks(release, where="id = ?", params=(matches[0].check_id,))
    if not rows:
        return None
    alts = []
    for m in matches[1:4]:
        alts.extend(store.checks(release, where="id = ?", params=(m.check_id,)))
    return Located(
        rows[0],
        "message",
        round(min(0.95, matches[0].score), 3),
        None,
        alts,
        [f"matched the message template `{matches[0].template}`", *notes],
    )


def locate_by_search(
    exc: ExceptionInfo,
    store: Store,
    release: str,
    search: Search,
    scope: Scope | None = None,
) -> Located | None:
    """Last resort: the best-ranked chunk holding a check of the right kind (inside
    ``scope``, when one is given and any hit is in it)."""
    if not exc.message:
        return None
    result = search(exc.message, release)
    hits = list(result.hits)
    note: str | None = None
    if scope is not None:
        hits, note = scope.keep(hits)
    for hit in hits:
        rows = [
            c
            for c in store.checks(
                release,
                path=hit.path,
                where="start_line >= ? AND end_line <= ?",
                params=(hit.start_line, hit.end_line),
            )
            if _kind_matches(c, exc)
        ]
        if rows:
            return Located(
                rows[0],
                "search",
                0.3,
                None,
                rows[1:3],
                [
                    "located by search only: the message matched no check template",
                    *([note] if note else []),
                ],
            )
    return None


#: lines around the mapped line searched for the check that holds the printed source line
_SOURCE_WINDOW = 80
#: confidence of a frame location that a cross-check contradicts
_CONTRADICTED = 0.5


def _norm(text: str | None) -> str:
    return " ".join((text or "").split())


def _source_in(store: Store, release: str, check: Check, source: str) -> bool:
    lines = store.file_lines(release, check.path, check.start_line, check.end_line)
    return any(_norm(line) == source for line in lines)


def _message_fits(store: Store, release: str, check: Check, exc: ExceptionInfo) -> bool | None:
    """Does the exception's message fit the check's message template? False only when the
    template does not match it at all while another check's template of the release
    matches it well; None when either has no message to compare (a bare assert, a
    message-less log). A long formatted value (a list of choices) lowers a right match's
    score, so a low score alone is no contradiction."""
    if not exc.message or not check.message or check.bare:
        return None
    from service.engine.locate.message import MESSAGE_MIN, match_message

    hits = match_message(store, release, exc.message, exc_type=exc.type, limit=12)
    if any(h.check_id == check.id for h in hits):
        return True
    return False if any(h.score >= MESSAGE_MIN for h in hits) else None


def _cross_checked(
    store: Store,
    release: str,
    exc: ExceptionInfo,
    frame: Frame,
    mapped: int,
    best: Check,
    conf: float,
    notes: list[str],
) -> Located:
    """The frame_line location, cross-checked with the printed source line and the message
    (see the module docstring)."""
    source = _norm(frame.source)
    if source and not _source_in(store, release, best, source):
        near = [
            c
            for c in store.checks(
                release,
                path=best.path,
                where="start_line >= ? AND start_line <= ?",
                params=(mapped - _SOURCE_WINDOW, mapped + _SOURCE_WINDOW),
            )
            if _kind_matches(c, exc) and _source_in(store, release, c, source)
        ]
        if near:
            other = min(near, key=lambda c: abs(c.start_line - mapped))
            notes.append(
                f"the log prints `{source[:80]}` at line {frame.line}; in {release} that "
                f"is line {other.start_line}'s check, not the one at line {mapped}"
            )
            fits = _message_fits(store, release, other, exc)
            if fits is False:
                notes.append(f"the message does not fit this check's message in {release}")
            return Located(
                other,
                "frame_source",
                0.9 if fits is not False else _CONTRADICTED,
                frame.line,
                [best],
                notes,
            )
        notes.append(
            f"the log prints `{source[:80]}` at line {frame.line}, which is not a line "
            f"of this check in {release}"
        )
        conf = min(conf, _CONTRADICTED)
    if _message_fits(store, release, best, exc) is False:
        notes.append(f"the message does not fit this check's message in {release}")
        conf = min(conf, _CONTRADICTED)
    return Located(best, "frame_line", conf, frame.line, notes=notes)
