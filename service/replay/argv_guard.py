"""A user's command line read the way the release's own argparse reads it, before replay.

argparse accepts any unambiguous prefix of a long option (``allow_abbrev``, on in every
SGLang release), ``--flag=value``, and repeated flags (the last one wins). A filter that
compares spellings lets ``--trust-remote``, ``--model-pat=X`` or
``--speculative-draft-model-pat X`` through; :func:`expand` therefore resolves every token
with the release's option table (:class:`OptionTable`, read from the release's own parser
by :mod:`service.replay.options`) exactly as Python 3.11's ``ArgumentParser._parse_optional``
does: an exact option string, ``--opt=value`` with an exact ``--opt``, else the options
the token is a prefix of (long options only when ``allow_abbrev``; single-dash tokens also
match a short option followed by its value, ``-mX``). More than one match is argparse's
"ambiguous option" error: replay refuses such a command line. Each option then takes the
value tokens its ``nargs`` says (greedily, as argparse), and the result is a list of
:class:`Item`: the canonical option string, its destination and its values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Item", "OptionTable", "expand", "path_like"]

_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class OptionTable:
    """What a release's server parser accepts: option string -> (dest, nargs kind), where
    the kind is ``"0"``, ``"1"``, ``"?"``, ``"*"``, ``"+"`` or a count (``"2"``)."""

    options: dict[str, tuple[str, str]]
    allow_abbrev: bool = True
    prefix_chars: str = "-"
    negative_number_options: bool = False
    required: frozenset[str] = frozenset()
    source: str = "parser"

    def spelling(self, dest: str, prefer: str) -> str | None:
        """The option string for ``dest``: ``prefer`` when it is one, else the longest."""
        names = [o for o, (d, _) in self.options.items() if d == dest]
        if prefer in names:
            return prefer
        return max(names, key=len) if names else None


@dataclass
class Item:
    """One element of an expanded command line: an option (``option`` set, with ``dest``)
    with its ``values``, or a stray value (``option`` None)."""

    token: str  # the user's spelling
    option: str | None = None
    dest: str | None = None
    values: list[str] = field(default_factory=list)
    inline: bool = False  # given as --opt=value

    def tokens(self) -> list[str]:
        """The canonical spelling: ``--full-option value...`` or ``--full-option=value``."""
        if self.option is None:
            return [self.token]
        if self.inline:
            return [f"{self.option}={self.values[0]}"]
        return [self.option, *self.values]


def path_like(value: str) -> bool:
    """Whether a value names (or could name) a file: ``/``, ``..`` or ``~`` anywhere, ``.``,
    or it exists relative to this process's working directory."""
    import os

    if "/" in value or ".." in value or "~" in value or value == ".":
        return True
    try:
        return os.path.lexists(value)
    except (OSError, ValueError):
        return True


def _matches(token: str, table: OptionTable) -> list[tuple[str, str | None]]:
    """argparse's ``_get_option_tuples``: (option string, explicit value) candidates."""
    chars = table.prefix_chars
    out: list[tuple[str, str | None]] = []
    if len(token) > 1 and token[0] in chars and token[1] in chars:
        if not table.allow_abbrev:
            return out
        prefix, _, explicit = token.partition("=")
        value = explicit if "=" in token else None
        out = [(opt, value) for opt in table.options if opt.startswith(prefix)]
    elif len(token) > 1 and token[0] in chars:
        short, short_value = token[:2], token[2:]
        for opt in table.options:
            if opt == short:
                out.append((opt, short_value))
            elif opt.startswith(token):
                out.append((opt, None))
    return out


def _classify(token: str, table: OptionTable) -> tuple[str, str | None] | str | None:
    """(option, explicit value) for an option token, ``"?"`` for an unknown option token
    (argparse: "unrecognized arguments"), None for a value token. Raises ``ValueError``
    for an ambiguous prefix."""
    if not token or token[0] not in table.prefix_chars:
        return None
    if token in table.options:
        return token, None
    if len(token) == 1:
        return None
    if "=" in token:
        name, _, value = token.partition("=")
        if name in table.options:
            return name, value
    found = _matches(token, table)
    if len(found) > 1:
        raise ValueError(f"ambiguous option: {token} could match " + ", ".join(o for o, _ in found))
    if len(found) == 1:
        return found[0]
    if _NEGATIVE.match(token) and not table.negative_number_options:
        return None
    if " " in token:
        return None
    return "?"


def _take(kind: str, values: list[str]) -> int:
    """How many of the following value tokens an option of ``kind`` consumes."""
    if kind == "0":
        return 0
    if kind == "?":
        return min(1, len(values))
    if kind in ("*", "+"):
        return len(values)
    return min(int(kind), len(values)) if kind.isdigit() else 1


def expand(argv: list[str], table: OptionTable) -> list[Item]:
    """``argv`` as the release's parser reads it (see the module docstring). Tokens after
    ``--`` are values. Raises ``ValueError`` for an ambiguous option."""
    kinds: list[tuple[str, str | None] | str | None] = []
    rest = False
    for token in argv:
        if rest:
            kinds.append(None)
            continue
        if token == "--":
            rest = True
            kinds.append(None)
            continue
        kinds.append(_classify(token, table))
    items: list[Item] = []
    i = 0
    while i < len(argv):
        kind = kinds[i]
        if kind is None or kind == "?":
            items.append(Item(argv[i]))
            i += 1
            continue
        assert isinstance(kind, tuple)
        option, explicit = kind
        dest, nargs = table.options[option]
        if explicit is not None:
            items.append(Item(argv[i], option, dest, [explicit], inline=True))
            i += 1
            continue
        following = []
        j = i + 1
        while j < len(argv) and kinds[j] is None and argv[j] != "--":
            following.append(argv[j])
            j += 1
        n = _take(nargs, following)
        items.append(Item(argv[i], option, dest, following[:n]))
        i += 1 + n
    return items
