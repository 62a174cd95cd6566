"""Message templates: the literal text of a check's message expression, with placeholders.

Every check in the KB stores the *source* of its message expression.
:func:`message_pattern` turns that source into a :class:`MessageTemplate`:
literal fragments separated by placeholders, whitespace-normalised as
:func:`normalise` normalises a user's message. The source is read with
:func:`ast.parse` only (never evaluated): string literals, implicit
concatenation, f-strings (``{expr}``, ``{expr!r:fmt}``; ``{{``/``}}`` are
literal braces), ``"..." % x`` (``%s``/``%d``/``%(name)s``; ``%%`` is a literal
``%``), ``"...".format(...)`` (``{}``/``{0}``/``{name}``) and ``+`` between
literal and non-literal parts. Messages that are a bare variable or call give
``None``.

:mod:`service.engine.locate.message.align` aligns a message with a template;
:mod:`service.engine.locate.message.match` indexes a release's templates and finds the checks.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

__all__ = ["MessageTemplate", "Placeholder", "message_parts", "message_pattern", "normalise"]

_MAX_SOURCE_CHARS = 20_000
_WS = re.compile(r"\s+")
_PERCENT_SPEC = re.compile(
    r"%(?:\([^)]{0,100}\))?[#0 +-]{0,5}(?:\*|\d{1,5})?(?:\.(?:\*|\d{1,5}))?[hlL]?[diouxXeEfFgGcrsab%]"
)


@dataclass(frozen=True)
class Placeholder:
    """A formatted value in a message: the source of its expression (``None`` when the
    message's arguments cannot be read, e.g. ``"%s" % args``), its conversion (``"r"``,
    ``"s"``, ``"a"`` or ``""``) and its format spec (``".2f"``; ``""`` when none)."""

    expr: str | None = None
    conversion: str = ""
    spec: str = ""


_HOLE = Placeholder()
_Part = str | Placeholder


@dataclass(eq=False)
class MessageTemplate:
    """Literal fragments of a message with a placeholder between each pair.

    ``fragments`` always has one more item than there are placeholders (the
    first and last may be empty when the message starts or ends with a
    placeholder). Fragments are whitespace-normalised: runs of whitespace are one
    space and the message's leading/trailing whitespace is dropped, the same normalisation
    :func:`service.engine.locate.message.match.match_message` applies to users' messages.
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
    parts = message_parts(message_src)
    if parts is None:
        return None
    template = _template(parts)
    if not any(template.fragments):
        return None
    return template


def message_parts(message_src: str) -> list[str | Placeholder] | None:
    """The literal text and :class:`Placeholder` s of a message expression's source, in
    order (``None`` when it is not a string built from literals; see :func:`message_pattern`).
    Adjacent literals are not merged and whitespace is kept as written."""
    if not message_src or len(message_src) > _MAX_SOURCE_CHARS:
        return None
    try:
        tree = ast.parse("(\n" + message_src + "\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None
    return _parts(tree.body)


_CONVERSIONS = {-1: "", ord("r"): "r", ord("s"): "s", ord("a"): "a"}
#: ``str(x)``/``repr(x)`` around a concatenated value: its conversion
_WRAPPERS = {"str": "s", "repr": "r"}


def _hole(node: ast.expr, conversion: str = "", spec: str = "") -> Placeholder:
    """The placeholder of a formatted expression (``str(x)``/``repr(x)`` unwrapped)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _WRAPPERS
        and len(node.args) == 1
        and not node.keywords
    ):
        return _hole(node.args[0], _WRAPPERS[node.func.id], spec)
    return Placeholder(ast.unparse(node), conversion, spec)


def _parts(node: ast.expr) -> list[_Part] | None:
    """Template parts of a string-valued expression; ``None`` if it is not one."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        out: list[_Part] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                spec = value.format_spec
                spec_src = (
                    "".join(
                        v.value
                        for v in spec.values
                        if isinstance(v, ast.Constant) and isinstance(v.value, str)
                    )
                    if isinstance(spec, ast.JoinedStr)
                    else ""
                )
                out.append(_hole(value.value, _CONVERSIONS.get(value.conversion, ""), spec_src))
            else:
                out.append(_HOLE)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _parts(node.left), _parts(node.right)
        if left is None and right is None:
            return None  # e.g. ``a + b``: nothing literal to anchor on
        head: list[_Part] = left if left is not None else [_hole(node.left)]
        tail: list[_Part] = right if right is not None else [_hole(node.right)]
        return head + tail
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = _parts(node.left)
        if left is None:
            return None
        return _expand(left, _PercentArgs(node.right).parts)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        base = _parts(node.func.value)
        if base is None:
            return None
        return _expand(base, _FormatArgs(node).parts)
    return None


def _expand(parts: list[_Part], split: Callable[[str], list[_Part] | None]) -> list[_Part] | None:
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


class _PercentArgs:
    """The right operand of ``"..." % args``, handed out spec by spec."""

    def __init__(self, args: ast.expr) -> None:
        self.items = list(args.elts) if isinstance(args, ast.Tuple) else [args]
        self.named = (
            {
                k.value: v
                for k, v in zip(args.keys, args.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
            if isinstance(args, ast.Dict)
            else {}
        )
        self.next = 0

    def take(self, spec: str) -> Placeholder:
        conv = "r" if spec.endswith("r") else ""
        fmt = spec[1:] if spec[-1:] in "dfeEgGxXo" else ""
        if spec.startswith("%("):
            name = spec[2 : spec.index(")")]
            node = self.named.get(name)
            return Placeholder(ast.unparse(node) if node is not None else name, conv, fmt)
        if self.next >= len(self.items) or any(isinstance(i, ast.Starred) for i in self.items):
            return _HOLE
        node = self.items[self.next]
        self.next += 1
        return _hole(node, conv, fmt)

    def parts(self, text: str) -> list[_Part]:
        """``%``-format specs become placeholders; ``%%`` is a literal ``%``."""
        out: list[_Part] = []
        pos = 0
        for m in _PERCENT_SPEC.finditer(text):
            out.append(text[pos : m.start()])
            out.append("%" if m.group() == "%%" else self.take(m.group()))
            pos = m.end()
        out.append(text[pos:])
        return out


class _FormatArgs:
    """The arguments of ``"...".format(...)``, looked up field by field."""

    def __init__(self, call: ast.Call) -> None:
        self.args = list(call.args)
        self.kwargs = {k.arg: k.value for k in call.keywords if k.arg is not None}
        self.next = 0

    def field(self, name: str, conv: str | None, spec: str) -> Placeholder:
        head, sep, rest = (
            name.partition(".") if "[" not in name.split(".")[0] else name.partition("[")
        )
        node: ast.expr | None
        if head == "":
            node = self.args[self.next] if self.next < len(self.args) else None
            self.next += 1
        elif head.isdigit():
            i = int(head)
            node = self.args[i] if i < len(self.args) else None
        else:
            node = self.kwargs.get(head)
        if node is None:
            return _HOLE
        src = ast.unparse(node) + (sep + rest if sep else "")
        return Placeholder(src, conv or "", spec)

    def parts(self, text: str) -> list[_Part] | None:
        """``str.format`` fields become placeholders; ``{{``/``}}`` are literal braces."""
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError:
            return None
        out: list[_Part] = []
        for literal, field_name, spec, conv in parsed:
            out.append(literal)
            if field_name is not None:
                out.append(self.field(field_name, conv, spec or ""))
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
