"""The values a crash message printed: each formatted expression bound to its text.

A check's message is built from literals and formatted expressions (f-strings, ``%``,
``str.format``, concatenation; :func:`~service.engine.locate.message.template.message_parts`).
The log holds the message as it was printed. Aligning the two gives, for every
expression, the text it printed: for SGLang's FP8 block-shape check

    f"... ({moe_intermediate_size=} / {moe_tp_size=}) % {weight_block_size_n=} == 0 ..."

and the log line ``... (moe_intermediate_size=1536 / moe_tp_size=8) % weight_block_size_n=128
== 0 ...``, ``moe_intermediate_size`` is 1536, ``moe_tp_size`` 8 and ``weight_block_size_n``
128. Each becomes a :class:`BoundValue` whose ``value`` is read from the text without
running anything (:func:`parse_printed`): numbers, ``None``/``True``/``False``, quoted
strings, lists/tuples/dicts of those (:func:`ast.literal_eval`), an enum's ``repr``
(``<MoeRunnerBackend.DEEP_GEMM: 'deep_gemm'>`` gives ``'deep_gemm'``) or its ``str``
(``MoeRunnerBackend.DEEP_GEMM`` stays that text, with the member named). Anything else is
kept as the printed text.

Alignment is literal-anchored and linear: each literal fragment is found after the
previous one (the last one at the end of the message), whitespace normalised on both
sides. When the message does not fit, its trailing lines are dropped one at a time (at
most 20): a log often prints a command or a logger line right after the exception. Two placeholders with no literal between them cannot be told apart and are
not bound; nor is a placeholder whose expression the message source does not name.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from service.engine.locate.message.template import Placeholder, message_parts, normalise

__all__ = ["BoundValue", "bind_message", "parse_printed"]

#: longest message aligned (longer ones are cut there; values past it stay unbound)
MAX_MESSAGE_CHARS = 8_000
#: longest printed text read as a literal
_MAX_LITERAL_CHARS = 2_000
#: trailing lines dropped, one at a time, when the whole message does not fit
_MAX_TRAILING_LINES = 20
_ENUM_REPR = re.compile(r"<([A-Za-z_]\w{0,100})\.([A-Za-z_]\w{0,100}): (.{1,500})>")
_ENUM_STR = re.compile(r"([A-Z]\w{0,100})\.([A-Z_][A-Z0-9_]{0,100})")
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class BoundValue:
    """One formatted expression of the message and what it printed.

    ``expr`` is the expression's source in the raising function, ``text`` the printed
    text, ``value`` what that text means (:func:`parse_printed`) and ``enum`` the
    ``(class, member)`` when it printed an enum member."""

    expr: str
    text: str
    value: object
    enum: tuple[str, str] | None = None

    @property
    def evidence(self) -> str:
        """How an answer cites it: ``printed in the message: expr=text``."""
        return f"printed in the message: {self.expr}={self.text}"


def parse_printed(text: str, spec: str = "") -> tuple[object, tuple[str, str] | None]:
    """(value, enum member) of a printed text; the text itself when it reads as nothing else."""
    t = text.strip()
    m = _ENUM_REPR.fullmatch(t)
    if m:
        inner, _ = parse_printed(m.group(3))
        return inner, (m.group(1), m.group(2))
    if len(t) <= _MAX_LITERAL_CHARS:
        try:
            value = ast.literal_eval(t)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            value = _NOTHING
        if value is not _NOTHING and not isinstance(value, complex | bytes | set):
            if spec.endswith("f") and isinstance(value, int):
                value = float(value)
            return value, None
    m = _ENUM_STR.fullmatch(t)
    if m:
        return t, (m.group(1), m.group(2))
    return t, None


_NOTHING = object()


def bind_message(message_src: str | None, message: str | None) -> list[BoundValue]:
    """The formatted expressions of ``message_src`` bound to what ``message`` printed.

    Empty when the source is not a literal-built message, when the message does not
    fit it, or when nothing can be bound. An expression printed twice with different
    texts is not bound (the alignment was ambiguous)."""
    if not message_src or not message:
        return []
    parts = message_parts(message_src)
    if parts is None:
        return []
    segments = _segments(parts)
    if segments is None:
        return []
    literals = [lit for lit, _ in segments]
    lines = message[:MAX_MESSAGE_CHARS].splitlines() or [""]
    texts = None
    # lines the log printed after the message (a command, a logger line) are not part of it
    for keep in range(len(lines), max(0, len(lines) - _MAX_TRAILING_LINES), -1):
        texts = _align(literals, normalise("\n".join(lines[:keep])))
        if texts is not None:
            break
    if texts is None:
        return []
    found: dict[str, BoundValue] = {}
    clash: set[str] = set()
    for (_, hole), text in zip(segments[:-1], texts, strict=True):
        if hole is None or hole.expr is None:
            continue
        value, enum = parse_printed(text, hole.spec)
        bound = BoundValue(hole.expr, text, value, enum)
        prior = found.get(hole.expr)
        if prior is not None and prior.text != text:
            clash.add(hole.expr)
        found.setdefault(hole.expr, bound)
    return [b for e, b in found.items() if e not in clash]


def _segments(parts: list[str | Placeholder]) -> list[tuple[str, Placeholder | None]] | None:
    """``[(literal, the placeholder after it), …, (last literal, None)]``, literals
    whitespace-normalised; two placeholders with no literal between them make the first
    unbindable (its placeholder becomes ``None``)."""
    out: list[tuple[str, Placeholder | None]] = []
    literal = ""
    holes = 0
    for part in parts:
        if isinstance(part, str):
            literal += part
            continue
        holes += 1
        if out and literal == "":  # right after another placeholder: neither is bound
            out[-1] = (out[-1][0], None)
            out.append(("", None))
            continue
        out.append((literal, part))
        literal = ""
    out.append((literal, None))
    if not holes:
        return None
    normed = [(_WS.sub(" ", lit), hole) for lit, hole in out]
    normed[0] = (normed[0][0].lstrip(), normed[0][1])
    normed[-1] = (normed[-1][0].rstrip(), None)
    return normed


def _align(literals: list[str], message: str) -> list[str] | None:
    """The texts between consecutive ``literals`` in ``message`` (None when it does not fit):
    the first literal starts it, the last one ends it, each other is the first occurrence
    after the previous one."""
    first, last = literals[0], literals[-1]
    if not message.startswith(first):
        # a prefix the log added (an exception type, a logger column): find the start
        at = message.find(first) if first else 0
        if at < 0:
            return None
        message = message[at:]
    pos = len(first)
    texts: list[str] = []
    for lit in literals[1:-1]:
        if not lit:
            texts.append("")  # an unbindable neighbour: nothing to anchor on
            continue
        at = message.find(lit, pos)
        if at < 0:
            return None
        texts.append(message[pos:at].strip())
        pos = at + len(lit)
    end = message.rfind(last) if last else len(message)
    if end < pos:
        return None
    if last and end + len(last) != len(message) and message[end + len(last) :].strip():
        return None
    texts.append(message[pos:end].strip())
    return texts
