"""Reading the words of an argparse error: the flags of 'unrecognized arguments', values next
to a flag, close choices, how a typed spelling resolves in a catalog, and how a flag is
described and cited. (The argv with a diagnosis's edits applied is
:func:`~service.engine.locate.argparse.work.fixed_argv`.)"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from kb.catalog_types import Catalog, FlagSpec

__all__ = [
    "adjacent_values",
    "choice_value",
    "closest_choices",
    "declaration_line",
    "describe_spec",
    "resolve_spelling",
    "typo_of",
    "unrecognized_groups",
]


def closest_choices(value: str, choices: Sequence[object]) -> list[str]:
    """The choice ``value`` spells (ignoring case and ``-``/``_``), else up to three close ones."""
    texts = [str(c) for c in choices]
    norm = value.strip().lower().replace("-", "_")
    exact = [t for t in texts if t.lower().replace("-", "_") == norm]
    if exact:
        return exact[:1]
    return difflib.get_close_matches(value, texts, n=3, cutoff=0.5) or difflib.get_close_matches(
        value.lower(), texts, n=3, cutoff=0.5
    )


def unrecognized_groups(message: str) -> list[tuple[str | None, list[str]]]:
    """``"--a=1 x --b"`` -> ``[("--a", ["1", "x"]), ("--b", [])]``; a leading stray value
    gets the flag ``None``."""
    groups: list[tuple[str | None, list[str]]] = []
    for tok in message.partition(":")[2].split():
        if tok.startswith("-") and len(tok) > 1 and not tok[1:2].isdigit():
            name, eq, value = tok.partition("=")
            groups.append((name, [value] if eq else []))
        elif groups:
            groups[-1][1].append(tok)
        else:
            groups.append((None, [tok]))
    return groups


def adjacent_values(argv: list[str], flag: str, values: list[str]) -> tuple[list[str], list[str]]:
    """Split ``values`` into those following ``flag`` in ``argv`` and the stray rest."""
    for i, tok in enumerate(argv):
        name, eq, inline = tok.partition("=")
        if name != flag:
            continue
        taken: list[str] = []
        if eq:
            taken.append(inline)
        j = i + 1
        while j < len(argv) and len(taken) < len(values) and argv[j] == values[len(taken)]:
            taken.append(argv[j])
            j += 1
        return taken, values[len(taken) :]
    return values, []


def resolve_spelling(token: str, catalog: Catalog) -> FlagSpec | None:
    """The spec a typed spelling (or unique prefix) selects in ``catalog``."""
    name = token.split("=", 1)[0]
    by_flag = catalog.by_flag()
    if name in by_flag:
        return by_flag[name]
    if name.startswith("--"):
        matches = [f for f in by_flag if f.startswith(name)]
        if len({by_flag[m].attr for m in matches}) == 1:
            return by_flag[matches[0]]
    return None


def describe_spec(spec: FlagSpec) -> str:
    """``action store_true, type int, nargs +, default 1``: the parts of ``spec`` that are set."""
    bits = []
    if spec.action and spec.action not in ("store", "append"):
        bits.append(f"action {spec.action}")
    if spec.type:
        bits.append(f"type {spec.type}")
    if spec.nargs:
        bits.append(f"nargs {spec.nargs}")
    if spec.default_known:
        bits.append(f"default {spec.default!r}")
    return ", ".join(bits)


def declaration_line(spec: FlagSpec | None) -> tuple[str, int] | None:
    """``(path, line)`` of the flag's declaration, when known."""
    return (spec.path, spec.line) if spec is not None and spec.path else None


def choice_value(spec: FlagSpec | None, text: str) -> object:
    """The choice of ``spec`` that prints as ``text`` (keeping its type), else ``text``."""
    if spec is not None and spec.choices:
        for c in spec.choices:
            if str(c) == text:
                return c
    return text


_CONFIDENT = 0.8  # difflib ratio of a misspelt word (see typo_of)


def typo_of(typed: str, flag: str) -> bool:
    """Whether ``typed`` looks like a misspelling of ``flag`` rather than another option.

    Word by word (split on ``-``): same number of words, and every differing word is
    at least 4 characters long and close (difflib ratio >= 0.8). So ``--reasoning-parsr``
    is ``--reasoning-parser``, but ``--attn-dp-size`` is not ``--attn-cp-size``.
    """
    a, b = typed.strip("-").split("-"), flag.strip("-").split("-")
    if len(a) != len(b) or a == b:
        return False
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        if min(len(x), len(y)) < 4 or difflib.SequenceMatcher(None, x, y).ratio() < _CONFIDENT:
            return False
    return True
