"""Aligning a user's message with a message template, and scoring the match.

:func:`align` lines the template's literal fragments up with a whitespace-normalised
message (see :func:`service.engine.locate.message.template.normalise`).
Fragments are located with ``str.find`` from left to right (earliest
occurrence first, which is optimal for ``literal .* literal .* literal``
patterns), so alignment is linear and cannot backtrack catastrophically;
:attr:`service.engine.locate.message.template.MessageTemplate.regex` is the equivalent regular
expression for callers that want one. Besides full matches, the aligner
reports partial ones, scored lower:

``full``       the whole message is one rendering of the template;
``contained``  the message holds a rendering plus extra text around it;
``truncated``  the message is the beginning of a rendering (it was cut short);
``inner``      the message starts inside the template (its beginning was lost);
``diverged``   the message starts like the template and then says something else
               (typically the same check reworded in another release).

:func:`score_alignment` is the fraction of the message explained by literal
text, lowered for partial kinds; :func:`type_factor` lowers it further for an
exception type that disagrees with the check.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "MIN_EXPLAINED",
    "MIN_LITERAL",
    "Alignment",
    "MatchKind",
    "align",
    "score_alignment",
    "type_factor",
]

MIN_LITERAL = 4  # shortest literal text worth anchoring on (shorter templates are not indexed)
MIN_EXPLAINED = 8  # a match must explain at least this many characters

MatchKind = Literal["full", "contained", "truncated", "inner", "diverged"]


@dataclass
class Alignment:
    """How a message lines up with a template: its kind, the literal characters it
    explains and, for full matches, the text filling each placeholder."""

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


def _walk(
    frags: list[str], msg: str, i: int, pos: int, explained: int, kind: MatchKind
) -> Alignment:
    """Continue after fragment ``i - 1`` ended at ``pos``; a placeholder comes next."""
    n = len(msg)
    last = len(frags) - 1
    values: list[str] = []
    while i <= last:
        frag = frags[i]
        if i == last:
            if not frag:
                values.append(msg[pos:])
                return Alignment(kind, explained, values)
            if msg.endswith(frag) and n - len(frag) >= pos:
                values.append(msg[pos : n - len(frag)])
                return Alignment(kind, explained + len(frag), values)
            j = msg.find(frag, pos)
            if j >= 0:  # extra text after the rendering
                return Alignment("contained", explained + len(frag))
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
        return Alignment(
            "truncated" if kind == "full" else kind, explained + _prefix_at_end(msg, pos, frag)
        )
    return Alignment(kind, explained, values)


def align(frags: list[str], msg: str) -> Alignment | None:
    """How ``msg`` lines up with the template; ``None`` when it does not at all."""
    first = frags[0]
    n = len(msg)
    if msg.startswith(first):
        if len(frags) == 1:
            if n == len(first):
                return Alignment("full", n)
            return Alignment("contained", len(first))
        return _walk(frags, msg, 1, len(first), len(first), "full")
    if first.startswith(msg):
        return Alignment("truncated", n)
    j = msg.find(first) if first else -1
    if j > 0:
        if len(frags) == 1:
            return Alignment("contained", len(first))
        got = _walk(frags, msg, 1, j + len(first), len(first), "contained")
        return got if got.kind != "full" else Alignment("contained", got.explained)
    inner = _align_inner(frags, msg)
    if inner is not None:
        return inner
    cp = _common_prefix(first, msg)
    if cp >= max(MIN_EXPLAINED, 12):
        return Alignment("diverged", cp)
    return None


def _align_inner(frags: list[str], msg: str) -> Alignment | None:
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
                return Alignment("inner", n)
            if msg.startswith(tail):
                if i == len(frags) - 1:
                    return Alignment("contained", len(tail))
                got = _walk(frags, msg, i + 1, len(tail), len(tail), "inner")
                return Alignment("inner", got.explained)
            k = frag.find(msg[:need], k + 1)
    # the message starts inside a placeholder's value: resume at the first later
    # fragment found in it
    last = len(frags) - 1
    for i in range(1, last + 1):
        frag = frags[i]
        if len(frag) < MIN_LITERAL:
            continue
        j = msg.find(frag)
        if j < 0:
            continue
        if i == last:
            return Alignment("inner", len(frag))
        got = _walk(frags, msg, i + 1, j + len(frag), len(frag), "inner")
        return Alignment("inner", got.explained)
    return None


_CLOSE = {"[": "]", "(": ")", "{": "}"}


def _printed_container(value: str) -> bool:
    """Whether a placeholder's text is one printed list, tuple, dict or set: brackets that
    open at its first character and close, balanced, at its last (quoted text aside)."""
    if len(value) < 2 or value[0] not in _CLOSE or value[-1] != _CLOSE[value[0]]:
        return False
    depth, quote = 0, ""
    for i, ch in enumerate(value):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[({":
            depth += 1
        elif ch in "])}":
            depth -= 1
            if depth == 0 and i != len(value) - 1:
                return False
    return depth == 0 and not quote


def score_alignment(al: Alignment, n: int, literal: int) -> float:
    """Score of ``al`` for a message of ``n`` characters and a template with ``literal``
    literal characters: the fraction explained, lowered for partial kinds. In a full
    match, a placeholder printed as one whole list, tuple, dict or set (``Must be one of
    ['fp8', ...]``) counts as explained: it is a value by its shape, however long."""
    explained = al.explained
    if al.kind == "full":
        explained += sum(len(v) for v in al.values if _printed_container(v))
    frac = min(1.0, explained / n) if n else 0.0
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
    name: obj
    for name, obj in vars(builtins).items()
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
