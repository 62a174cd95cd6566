"""Find the check that raised an exception from its message alone.

Most crash reports carry ``ValueError: <message>`` and no usable frames. Every
check in the KB stores the *source* of its message expression; this module
turns that source into a :class:`MessageTemplate` (literal fragments separated
by placeholders) and matches a user's message against the templates of one
release.

Templates (:func:`message_pattern`) are read with :func:`ast.parse` only (never
evaluated): string literals, implicit concatenation, f-strings (``{expr}``,
``{expr!r:fmt}``; ``{{``/``}}`` are literal braces), ``"..." % x``
(``%s``/``%d``/``%(name)s``; ``%%`` is a literal ``%``), ``"...".format(...)``
(``{}``/``{0}``/``{name}``) and ``+`` between literal and non-literal parts.
Messages that are a bare variable or call give ``None``.

Matching (:func:`match_message`) normalises whitespace on both sides (a message
wrapped over several lines matches its one-line source), then aligns the
template's literal fragments with the message. Fragments are located with
``str.find`` from left to right (earliest occurrence first, which is optimal for
``literal .* literal .* literal`` patterns), so matching is linear and cannot
backtrack catastrophically; :attr:`MessageTemplate.regex` is the equivalent
regular expression for callers that want one. Besides full matches, the aligner
reports partial ones, scored lower:

``full``       the whole message is one rendering of the template;
``contained``  the message holds a rendering plus extra text around it;
``truncated``  the message is the beginning of a rendering (it was cut short);
``inner``      the message starts inside the template (its beginning was lost);
``diverged``   the message starts like the template and then says something else
               (typically the same check reworded in another release).

The score is the fraction of the message explained by literal text, lowered for
partial kinds and for an exception type that disagrees with the check.

Each release gets an in-process index built once per ``(KB file, release,
content hash)``: templates are deduplicated and filed under their *anchor*, the
rarest whole word of their literal text, so a full match is always found by
looking up the message's words; partial matches come from the postings of the
message's rarest words. A warm lookup takes a few milliseconds.
"""

from __future__ import annotations

import ast
import builtins
import re
import string
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from pydantic import BaseModel

from ..kb.store import Store

__all__ = ["MessageMatch", "MessageTemplate", "match_message", "message_pattern"]

MAX_MESSAGE_CHARS = 2000
"""Characters of a user's message that are looked at; the rest is ignored."""

_MAX_SOURCE_CHARS = 20_000
_MIN_LITERAL = 4  # templates with fewer literal characters are not indexed
_MIN_EXPLAINED = 8  # a match must explain at least this many characters
_MIN_SCORE = 0.1
_PARTIAL_WORDS = 6  # rarest message words whose postings feed partial matches
_PARTIAL_CANDIDATES = 80
_WS = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_EXC_PREFIX = re.compile(
    r"^([A-Za-z_][\w.]{0,200}?(?:Error|Exception|Exit|Interrupt|Warning|Failure)):\s"
)
_PERCENT_SPEC = re.compile(
    r"%(?:\([^)]{0,100}\))?[#0 +-]{0,5}(?:\*|\d{1,5})?(?:\.(?:\*|\d{1,5}))?[hlL]?[diouxXeEfFgGcrsab%]"
)

MatchKind = Literal["full", "contained", "truncated", "inner", "diverged"]


class _Hole:
    """A placeholder in a list of template parts."""


_HOLE = _Hole()
_Part = str | _Hole


# ---------------------------------------------------------------------------
# templates
# ---------------------------------------------------------------------------


@dataclass(eq=False)
class MessageTemplate:
    """Literal fragments of a message with a placeholder between each pair.

    ``fragments`` always has one more item than there are placeholders (the
    first and last may be empty when the message starts or ends with a
    placeholder). Fragments are whitespace-normalised: runs of whitespace are one
    space and the message's leading/trailing whitespace is dropped, the same
    normalisation :func:`match_message` applies to users' messages.
    """

    fragments: list[str]
    literal_chars: int = field(init=False)

    def __post_init__(self) -> None:
        self.literal_chars = sum(len(f) for f in self.fragments)

    @property
    def placeholders(self) -> int:
        return len(self.fragments) - 1

    @property
    def text(self) -> str:
        """Human-readable form, placeholders shown as ``{…}``."""
        return "{…}".join(self.fragments)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The template as a regular expression (use with ``fullmatch``).

        Literal parts are escaped with whitespace as ``\\s+``; each placeholder is a
        non-greedy ``(.*?)`` (DOTALL). Adjacent placeholders are already merged. Bound
        the input length when matching untrusted text with it.
        """
        parts = []
        for frag in self.fragments:
            parts.append(r"\s+".join(re.escape(w) for w in frag.split(" ")))
        return re.compile(r"\s*" + "(.*?)".join(parts) + r"\s*", re.DOTALL)


def normalise(text: str) -> str:
    """Collapse whitespace runs to one space and strip the ends."""
    return _WS.sub(" ", text).strip()


def message_pattern(message_src: str) -> MessageTemplate | None:
    """The :class:`MessageTemplate` of a message expression's source, or ``None``.

    ``None`` when the source is not a string-valued expression built from
    literals (a variable, a call, a conditional, a tuple, bytes ...) or when it
    has no literal text at all.
    """
    if not message_src or len(message_src) > _MAX_SOURCE_CHARS:
        return None
    try:
        tree = ast.parse("(\n" + message_src + "\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None
    parts = _parts(tree.body)
    if parts is None:
        return None
    template = _template(parts)
    if not any(template.fragments):
        return None
    return template


def _parts(node: ast.expr) -> list[_Part] | None:
    """Template parts of a string-valued expression; ``None`` if it is not one."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        out: list[_Part] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.append(value.value)
            else:
                out.append(_HOLE)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _parts(node.left), _parts(node.right)
        if left is None and right is None:
            return None  # e.g. ``a + b``: nothing literal to anchor on
        return (left if left is not None else [_HOLE]) + (right if right is not None else [_HOLE])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = _parts(node.left)
        if left is None:
            return None
        return _expand(left, _percent_parts)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        base = _parts(node.func.value)
        if base is None:
            return None
        return _expand(base, _format_parts)
    return None


def _expand(parts: list[_Part],
            split: Callable[[str], list[_Part] | None]) -> list[_Part] | None:
    out: list[_Part] = []
    for part in parts:
        if isinstance(part, str):
            pieces = split(part)
            if pieces is None:
                return None
            out.extend(pieces)
        else:
            out.append(part)
    return out


def _percent_parts(text: str) -> list[_Part]:
    """``%``-format specs become placeholders; ``%%`` is a literal ``%``."""
    out: list[_Part] = []
    pos = 0
    for m in _PERCENT_SPEC.finditer(text):
        out.append(text[pos : m.start()])
        out.append("%" if m.group() == "%%" else _HOLE)
        pos = m.end()
    out.append(text[pos:])
    return out


def _format_parts(text: str) -> list[_Part] | None:
    """``str.format`` fields become placeholders; ``{{``/``}}`` are literal braces."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return None
    out: list[_Part] = []
    for literal, field_name, _spec, _conv in parsed:
        out.append(literal)
        if field_name is not None:
            out.append(_HOLE)
    return out


def _template(parts: Iterable[_Part]) -> MessageTemplate:
    """Merge adjacent literals and adjacent placeholders, then normalise whitespace."""
    frags: list[str] = [""]
    for part in parts:
        if isinstance(part, str):
            frags[-1] += part
        elif len(frags) == 1 or frags[-1]:
            frags.append("")
        # else: a placeholder right after another one merges with it
    normed = [_WS.sub(" ", f) for f in frags]
    normed[0] = normed[0].lstrip()
    normed[-1] = normed[-1].rstrip()
    return MessageTemplate(fragments=normed)


# ---------------------------------------------------------------------------
# alignment
# ---------------------------------------------------------------------------


@dataclass
class _Alignment:
    kind: MatchKind
    explained: int
    values: list[str] = field(default_factory=list)


def _prefix_at_end(msg: str, pos: int, frag: str) -> int:
    """Longest ``l`` with ``msg`` ending in ``frag[:l]`` starting at or after ``pos``."""
    n = len(msg)
    if not frag:
        return 0
    first = frag[0]
    k = max(pos, n - len(frag))
    while k < n:
        k = msg.find(first, k)
        if k < 0:
            return 0
        if frag.startswith(msg[k:]):
            return n - k
        k += 1
    return 0


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _walk(frags: list[str], msg: str, i: int, pos: int, explained: int,
          kind: MatchKind) -> _Alignment:
    """Continue after fragment ``i - 1`` ended at ``pos``; a placeholder comes next."""
    n = len(msg)
    last = len(frags) - 1
    values: list[str] = []
    while i <= last:
        frag = frags[i]
        if i == last:
            if not frag:
                values.append(msg[pos:])
                return _Alignment(kind, explained, values)
            if msg.endswith(frag) and n - len(frag) >= pos:
                values.append(msg[pos : n - len(frag)])
                return _Alignment(kind, explained + len(frag), values)
            j = msg.find(frag, pos)
            if j >= 0:  # extra text after the rendering
                return _Alignment("contained", explained + len(frag))
        else:
            start = pos - 1 if frag.startswith(" ") and pos > 0 and msg[pos - 1] == " " else pos
            j = msg.find(frag, start)
            if j >= 0:
                values.append(msg[pos:j] if j >= pos else "")
                pos = j + len(frag)
                explained += len(frag)
                i += 1
                continue
        # fragment i is missing: the message ends inside the template
        return _Alignment("truncated" if kind == "full" else kind,
                          explained + _prefix_at_end(msg, pos, frag))
    return _Alignment(kind, explained, values)


def _align(frags: list[str], msg: str) -> _Alignment | None:
    """How ``msg`` lines up with the template; ``None`` when it does not at all."""
    first = frags[0]
    n = len(msg)
    if msg.startswith(first):
        if len(frags) == 1:
            if n == len(first):
                return _Alignment("full", n)
            return _Alignment("contained", len(first))
        return _walk(frags, msg, 1, len(first), len(first), "full")
    if first.startswith(msg):
        return _Alignment("truncated", n)
    j = msg.find(first) if first else -1
    if j > 0:
        if len(frags) == 1:
            return _Alignment("contained", len(first))
        got = _walk(frags, msg, 1, j + len(first), len(first), "contained")
        return got if got.kind != "full" else _Alignment("contained", got.explained)
    inner = _align_inner(frags, msg)
    if inner is not None:
        return inner
    cp = _common_prefix(first, msg)
    if cp >= max(_MIN_EXPLAINED, 12):
        return _Alignment("diverged", cp)
    return None


def _align_inner(frags: list[str], msg: str) -> _Alignment | None:
    """The message starts inside a fragment (its beginning was cut off)."""
    n = len(msg)
    need = min(n, 12)
    for i, frag in enumerate(frags):
        if len(frag) < need:
            continue
        k = frag.find(msg[:need])
        while k >= 0:
            tail = frag[k:]
            if tail.startswith(msg):
                return _Alignment("inner", n)
            if msg.startswith(tail):
                if i == len(frags) - 1:
                    return _Alignment("contained", len(tail))
                got = _walk(frags, msg, i + 1, len(tail), len(tail), "inner")
                return _Alignment("inner", got.explained)
            k = frag.find(msg[:need], k + 1)
    # the message starts inside a placeholder's value: resume at the first later
    # fragment found in it
    last = len(frags) - 1
    for i in range(1, last + 1):
        frag = frags[i]
        if len(frag) < _MIN_LITERAL:
            continue
        j = msg.find(frag)
        if j < 0:
            continue
        if i == last:
            return _Alignment("inner", len(frag))
        got = _walk(frags, msg, i + 1, j + len(frag), len(frag), "inner")
        return _Alignment("inner", got.explained)
    return None


def _score(al: _Alignment, n: int, literal: int) -> float:
    frac = al.explained / n if n else 0.0
    cover = min(1.0, al.explained / literal) if literal else 0.0
    if al.kind == "full":
        return frac
    if al.kind == "contained":
        return frac * 0.9
    if al.kind == "truncated":
        return frac * (0.5 + 0.4 * cover)
    if al.kind == "inner":
        return frac * (0.4 + 0.4 * cover)
    return frac * 0.5 * cover  # diverged


_BUILTIN_EXC = {
    name: obj for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


def type_factor(user_type: str | None, kind: str, exc_type: str | None) -> float:
    """1.0 when the exception types agree, less when they may or do not.

    ``AssertionError`` pairs with ``assert`` checks; builtin types in one
    hierarchy (``NotImplementedError``/``RuntimeError``, anything/``Exception``)
    get 0.85; a custom type we cannot relate 0.75; unrelated builtins 0.5.
    """
    if not user_type or user_type in ("<unknown>", "?"):
        return 1.0
    user = user_type.rsplit(".", 1)[-1]
    check = "AssertionError" if kind == "assert" else exc_type
    if not check:
        return 0.9
    if user == check:
        return 1.0
    bu, bc = _BUILTIN_EXC.get(user), _BUILTIN_EXC.get(check)
    if bu is not None and bc is not None:
        return 0.85 if issubclass(bu, bc) or issubclass(bc, bu) else 0.5
    return 0.75


# ---------------------------------------------------------------------------
# the per-release index
# ---------------------------------------------------------------------------


@dataclass
class _Row:
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
    rows: list[_Row]
    words: frozenset[str]


@dataclass
class _Index:
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


def _build(store: Store, release: str) -> _Index:
    rows = store.query(
        "SELECT id, path, function, kind, exc_type, message, start_line, end_line "
        "FROM checks WHERE release = ? AND message IS NOT NULL ORDER BY path, start_line",
        (release,),
    )
    by_key: dict[tuple[str, ...], _Entry] = {}
    parsed: dict[str, MessageTemplate | None] = {}
    for r in rows:
        src = r["message"]
        if src not in parsed:
            parsed[src] = message_pattern(src)
        tpl = parsed[src]
        if tpl is None or tpl.literal_chars < _MIN_LITERAL:
            continue
        key = tuple(tpl.fragments)
        entry = by_key.get(key)
        if entry is None:
            entry = by_key[key] = _Entry(tpl, [], frozenset(_interior_words(tpl.fragments)))
        entry.rows.append(_Row(r["id"], r["path"], r["function"] or "", r["kind"],
                               r["exc_type"], r["start_line"], r["end_line"]))
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
    return _Index(entries, anchors, postings)


_lock = threading.Lock()
_key_locks: dict[tuple[str, str, str], threading.Lock] = {}
_indexes: dict[tuple[str, str, str], _Index] = {}


def _index(store: Store, release: str) -> _Index:
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
    return m.group(1).rsplit(".", 1)[-1], message[m.end():]


def match_message(store: Store, release: str, message: str, exc_type: str | None = None,
                  limit: int = 5) -> list[MessageMatch]:
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
    if len(msg) < _MIN_EXPLAINED or limit <= 0:
        return []
    index = _index(store, release)
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

    scored: list[tuple[float, int, _Entry, _Alignment]] = []
    for idx in candidates:
        entry = index.entries[idx]
        al = _align(entry.template.fragments, msg)
        if al is None or al.explained < _MIN_EXPLAINED:
            continue
        base = _score(al, len(msg), entry.template.literal_chars)
        if base >= _MIN_SCORE:
            scored.append((base, idx, entry, al))

    out: list[MessageMatch] = []
    for base, _idx, entry, al in scored:
        for row in entry.rows:
            score = base * type_factor(exc_type, row.kind, row.exc_type)
            if score < _MIN_SCORE:
                continue
            out.append(MessageMatch(
                check_id=row.check_id, release=release, path=row.path, function=row.function,
                kind=row.kind, exc_type=row.exc_type, start_line=row.start_line,
                end_line=row.end_line, score=round(min(1.0, score), 4),
                template=entry.template.text, match_kind=al.kind,
                literal_chars=entry.template.literal_chars,
                values=al.values if al.kind == "full" else [],
            ))
    out.sort(key=lambda m: (-m.score, -m.literal_chars, m.path, m.start_line))
    return out[:limit]
