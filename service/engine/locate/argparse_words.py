"""Reading the words of an argparse error: the flags of 'unrecognized arguments', values next
to a flag, close choices, how a typed spelling resolves in a catalog, and the argv with a
diagnosis's edits applied (:func:`_fix`)."""

from __future__ import annotations

import difflib
from typing import Any

from kb.catalog_types import Catalog, FlagSpec
from service.engine.flags.edit import apply_edits


def _closest(value: str, choices: list) -> list[str]:
    texts = [str(c) for c in choices]
    norm = value.strip().lower().replace("-", "_")
    exact = [t for t in texts if t.lower().replace("-", "_") == norm]
    if exact:
        return exact[:1]
    return difflib.get_close_matches(value, texts, n=3, cutoff=0.5) or difflib.get_close_matches(
        value.lower(), texts, n=3, cutoff=0.5
    )


def _unrecognized_groups(message: str) -> list[tuple[str | None, list[str]]]:
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


def _adjacent_values(argv: list[str], flag: str, values: list[str]) -> tuple[list[str], list[str]]:
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


def _resolve(token: str, catalog: Catalog) -> FlagSpec | None:
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


def _normalise(token: str) -> str:
    tok = token.split("=", 1)[0].strip().lower().replace("_", "-")
    if not tok.startswith("-"):
        return "--" + tok
    if not tok.startswith("--") and len(tok) > 2:
        return "-" + tok
    return tok


def _describe(spec: FlagSpec) -> str:
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


def _line(spec: FlagSpec | None) -> tuple[str, int] | None:
    return (spec.path, spec.line) if spec is not None and spec.path else None


def _choice_value(spec: FlagSpec | None, text: str) -> object:
    if spec is not None and spec.choices:
        for c in spec.choices:
            if str(c) == text:
                return c
    return text


_CONFIDENT = 0.8  # difflib ratio of a misspelt word (see _typo_of)


def _typo_of(typed: str, flag: str) -> bool:
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


def _fix(w: Any) -> list[str] | None:  # noqa: ANN401 - argparse_errors._Work
    """The argv with every applicable edit applied (``None`` without argv or edits)."""
    if w.argv is None or not w.edits:
        return None
    tokens = list(w.argv)
    changed = False
    for edit in w.edits:
        for key, val in edit.get("inline", {}).items():
            for i, tok in enumerate(tokens[:-1]):
                if tok == key and tokens[i + 1] == val:
                    tokens[i : i + 2] = [f"{key}={val}"]
                    changed = True
                    break
        for stray in edit.get("drop", []):
            i = _stray_index(tokens, stray, w.catalog)
            if i is not None:
                del tokens[i]
                changed = True
        remove = list(edit.get("remove", []))
        if remove and not any(t.split("=", 1)[0] in remove for t in tokens):
            continue  # the command does not carry the offending flag: leave it alone
        if remove or edit.get("set"):
            try:
                tokens = apply_edits(tokens, w.catalog, set=edit.get("set"), remove=remove)
            except KeyError:
                continue
            changed = True
    if not changed:
        return None
    return tokens


def _stray_index(tokens: list[str], stray: str, catalog: Catalog) -> int | None:
    """Position of ``stray``: after a switch if possible, else its only occurrence."""
    hits = [i for i, t in enumerate(tokens) if t == stray]
    for i in hits:
        prev = _resolve(tokens[i - 1], catalog) if i > 0 and tokens[i - 1].startswith("-") else None
        if prev is not None and not prev.takes_value:
            return i
    return hits[0] if len(hits) == 1 else None
