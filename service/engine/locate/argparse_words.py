"""Reading the words of an argparse error: the flags of 'unrecognized arguments', values next to a flag, close choices."""

from __future__ import annotations

import difflib


def _closest(value: str, choices: list) -> list[str]:
    texts = [str(c) for c in choices]
    norm = value.strip().lower().replace("-", "_")
    exact = [t for t in texts if t.lower().replace("-", "_") == norm]
    if exact:
        return exact[:1]
    return difflib.get_close_matches(value, texts, n=3, cutoff=0.5) or \
        difflib.get_close_matches(value.lower(), texts, n=3, cutoff=0.5)


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
        return taken, values[len(taken):]
    return values, []
