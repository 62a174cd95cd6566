"""Find the check that raised an exception from its message alone.

Most crash reports carry ``ValueError: <message>`` and no usable frames. Every
check in the KB stores the *source* of its message expression;
:mod:`service.engine.locate.message.template` turns that source into a template (literal
fragments separated by placeholders) and :mod:`service.engine.locate.message.align` aligns a
message with one and scores the match. This module matches a user's message against the
templates of one release (:func:`match_message`), after normalising its
whitespace (a message wrapped over several lines matches its one-line source)
and splitting off a leading ``SomeError: ``.

Each release gets an in-process index built once per ``(KB file, release,
content hash)``: templates are deduplicated and filed under their *anchor*, the
rarest whole word of their literal text, so a full match is always found by
looking up the message's words; partial matches come from the postings of the
message's rarest words. A warm lookup takes a few milliseconds.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel

from kb.store import Store
from service.engine.locate.message.align import (
    MIN_EXPLAINED,
    MIN_LITERAL,
    Alignment,
    MatchKind,
    align,
    score_alignment,
    type_factor,
)
from service.engine.locate.message.template import MessageTemplate, message_pattern, normalise

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MESSAGE_MIN",
    "IndexRow",
    "MessageIndex",
    "MessageMatch",
    "build_index",
    "match_in",
    "match_message",
    "split_exception_prefix",
]

MAX_MESSAGE_CHARS = 2000
"""Characters of a user's message that are looked at; the rest is ignored."""

_MIN_SCORE = 0.1
MESSAGE_MIN = 0.5
"""The score from which a match is taken for the check that raised the message."""
_PARTIAL_WORDS = 6  # rarest message words whose postings feed partial matches
_PARTIAL_CANDIDATES = 80
_WORD = re.compile(r"\w+")
_EXC_PREFIX = re.compile(
    r"^([A-Za-z_][\w.]{0,200}?(?:Error|Exception|Exit|Interrupt|Warning|Failure)):\s"
)


# ---------------------------------------------------------------------------
# the per-release index
# ---------------------------------------------------------------------------


@dataclass
class IndexRow:
    """What a template stands for: a check of the KB (``check_id`` its id), or any row a
    caller of :func:`build_index` keys by ``check_id``."""

    check_id: int
    path: str
    function: str
    kind: str
    exc_type: str | None
    start_line: int
    end_line: int


@dataclass
class _Entry:
    template: MessageTemplate
    rows: list[IndexRow]
    words: frozenset[str]


@dataclass
class MessageIndex:
    entries: list[_Entry]
    anchors: dict[str, list[int]]
    postings: dict[str, list[int]]


def _interior_words(frags: list[str]) -> set[str]:
    """Lower-cased words that appear whole in any rendering of the template."""
    out: set[str] = set()
    last = len(frags) - 1
    for i, frag in enumerate(frags):
        for m in _WORD.finditer(frag):
            if (m.start() > 0 or i == 0) and (m.end() < len(frag) or i == last):
                out.add(m.group().lower())
    return out


def _build(store: Store, release: str) -> MessageIndex:
    rows = store.query(
        "SELECT id, path, function, kind, exc_type, message, start_line, end_line "
        "FROM checks WHERE release = ? AND message IS NOT NULL ORDER BY path, start_line",
        (release,),
    )
    return build_index(
        (
            r["message"],
            IndexRow(
                r["id"],
                r["path"],
                r["function"] or "",
                r["kind"],
                r["exc_type"],
                r["start_line"],
                r["end_line"],
            ),
        )
        for r in rows
    )


def build_index(rows: Iterable[tuple[str, IndexRow]]) -> MessageIndex:
    """An index of message sources (each with the row it stands for): templates
    deduplicated, each filed under its anchor word and in the postings of its words.
    :func:`match_message` builds one per release of the KB; other sources of message
    templates (the atlas of every release) build theirs with this and match with
    :func:`match_in`."""
    by_key: dict[tuple[str, ...], _Entry] = {}
    parsed: dict[str, MessageTemplate | None] = {}
    for src, row in rows:
        if src not in parsed:
            parsed[src] = message_pattern(src)
        tpl = parsed[src]
        if tpl is None or tpl.literal_chars < MIN_LITERAL:
            continue
        key = tuple(tpl.fragments)
        entry = by_key.get(key)
        if entry is None:
            entry = by_key[key] = _Entry(tpl, [], frozenset(_interior_words(tpl.fragments)))
        entry.rows.append(row)
    entries = list(by_key.values())
    df: Counter[str] = Counter()
    for e in entries:
        df.update(e.words)
    anchors: dict[str, list[int]] = {}
    postings: dict[str, list[int]] = {}
    for idx, e in enumerate(entries):
        if not e.words:
            continue
        anchor = min(e.words, key=lambda w: (df[w], -len(w), w))
        anchors.setdefault(anchor, []).append(idx)
        for w in e.words:
            postings.setdefault(w, []).append(idx)
    return MessageIndex(entries, anchors, postings)


_lock = threading.Lock()
_key_locks: dict[tuple[str, str, str], threading.Lock] = {}
_indexes: dict[tuple[str, str, str], MessageIndex] = {}


def _index(store: Store, release: str) -> MessageIndex:
    rel = store.require(release)
    key = (str(store.path), release, str(rel["content_hash"]))
    with _lock:
        hit = _indexes.get(key)
        if hit is not None:
            return hit
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        with _lock:
            hit = _indexes.get(key)
        if hit is None:
            hit = _build(store, release)
            with _lock:
                _indexes[key] = hit
    return hit


# ---------------------------------------------------------------------------
# matching
# ---------------------------------------------------------------------------


class MessageMatch(BaseModel):
    """A check whose message template matches the user's message."""

    check_id: int
    release: str
    path: str
    function: str
    kind: str
    exc_type: str | None
    start_line: int
    end_line: int
    score: float  # 0..1: fraction of the message explained by literal text, penalised
    template: str  # placeholders shown as {…}
    match_kind: MatchKind
    literal_chars: int
    values: list[str]  # text filling the placeholders (full matches only)


def split_exception_prefix(message: str) -> tuple[str | None, str]:
    """``("ValueError", "msg")`` for ``"ValueError: msg"``; ``(None, message)`` otherwise."""
    m = _EXC_PREFIX.match(message)
    if m is None:
        return None, message
    return m.group(1).rsplit(".", 1)[-1], message[m.end() :]


def match_message(
    store: Store, release: str, message: str, exc_type: str | None = None, limit: int = 5
) -> list[MessageMatch]:
    """Checks of ``release`` whose message template matches ``message``, best first.

    Only the first :data:`MAX_MESSAGE_CHARS` characters are used. A leading
    ``SomeError: `` is split off (and used as ``exc_type`` when none is given).
    Matches are ordered by score, then by literal characters (more specific
    templates first); each check is listed on its own, so a template used at
    several places yields several matches.
    """
    text = message[:MAX_MESSAGE_CHARS]
    prefix_type, rest = split_exception_prefix(text.lstrip())
    if prefix_type is not None:
        text = rest
        exc_type = exc_type if exc_type not in (None, "", "<unknown>") else prefix_type
    msg = normalise(text)
    if len(msg) < MIN_EXPLAINED or limit <= 0:
        return []
    return match_in(_index(store, release), release, msg, exc_type, limit)


def match_in(
    index: MessageIndex, release: str, msg: str, exc_type: str | None, limit: int
) -> list[MessageMatch]:
    """The rows of ``index`` whose template matches the normalised message ``msg``, best
    first (what :func:`match_message` does once it has the release's index)."""
    words = {w.lower() for w in _WORD.findall(msg)}
    candidates: set[int] = set()
    for w in words:
        candidates.update(index.anchors.get(w, ()))
    rare = sorted((w for w in words if w in index.postings), key=lambda w: len(index.postings[w]))
    weight: Counter[int] = Counter()
    for w in rare[:_PARTIAL_WORDS]:
        post = index.postings[w]
        for idx in post:
            weight[idx] += 1
    candidates.update(idx for idx, _ in weight.most_common(_PARTIAL_CANDIDATES))

    scored: list[tuple[float, int, _Entry, Alignment]] = []
    for idx in candidates:
        entry = index.entries[idx]
        al = align(entry.template.fragments, msg)
        if al is None or al.explained < MIN_EXPLAINED:
            continue
        base = score_alignment(al, len(msg), entry.template.literal_chars)
        if base >= _MIN_SCORE:
            scored.append((base, idx, entry, al))

    out: list[MessageMatch] = []
    for base, _idx, entry, al in scored:
        for row in entry.rows:
            score = base * type_factor(exc_type, row.kind, row.exc_type)
            if score < _MIN_SCORE:
                continue
            out.append(
                MessageMatch(
                    check_id=row.check_id,
                    release=release,
                    path=row.path,
                    function=row.function,
                    kind=row.kind,
                    exc_type=row.exc_type,
                    start_line=row.start_line,
                    end_line=row.end_line,
                    score=round(min(1.0, score), 4),
                    template=entry.template.text,
                    match_kind=al.kind,
                    literal_chars=entry.template.literal_chars,
                    values=al.values if al.kind == "full" else [],
                )
            )
    out.sort(key=lambda m: (-m.score, -m.literal_chars, m.path, m.start_line))
    return out[:limit]
