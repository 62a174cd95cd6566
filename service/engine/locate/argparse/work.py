"""The state of one argparse diagnosis while it is built, and the argv its edits give.

Each kind of error (:mod:`~service.engine.locate.argparse.unrecognized`,
:mod:`~service.engine.locate.argparse.option_errors`) adds to a :class:`Work`: the edits,
the notes, the flags whose history the answer lists, the declaration to cite.
:func:`fixed_argv` applies the edits, including the two keys beyond
:func:`~service.engine.flags.edit.apply_edits` (``drop`` and ``inline``; see
:mod:`~service.engine.locate.argparse.diagnose`).
"""

from __future__ import annotations

from typing import Any

from kb.catalog_types import Catalog
from kb.store import Store
from service.engine.flags.edit import apply_edits
from service.engine.locate.argparse.words import resolve_spelling
from service.engine.locate.flag_history import FlagHistory, Scope, flag_history, scoped_catalog

__all__ = ["Work", "fixed_argv"]


class Work:
    """Mutable state of one diagnosis."""

    def __init__(
        self,
        store: Store,
        release: str,
        catalog: Catalog,
        argv: list[str] | None,
        scope: Scope = "llm",
    ) -> None:
        self.store, self.release, self.full, self.argv = store, release, catalog, argv
        self.scope = scope
        self.catalog = scoped_catalog(catalog, scope)  # the flags of the parser that ran
        self.foreign: list[str] = []
        self.leads: list[str] = []  # short words for the first sentence (the answer's summary)
        self.suggestions: list[str] = []
        self.edits: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.history_flags: list[str] = []
        self.line: tuple[str, int] | None = None

    def history(self) -> list[FlagHistory]:
        """The history of each flag the answer names (without ``=value``), once, in order."""
        seen: list[str] = []
        for f in self.history_flags:
            f = f.split("=", 1)[0]
            if f.startswith("-") and f not in seen:
                seen.append(f)
        return [flag_history(self.store, f, self.release, self.scope) for f in seen]


def fixed_argv(w: Work) -> list[str] | None:
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
            at = _stray_index(tokens, stray, w.catalog)
            if at is not None:
                del tokens[at]
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
        prev = (
            resolve_spelling(tokens[i - 1], catalog)
            if i > 0 and tokens[i - 1].startswith("-")
            else None
        )
        if prev is not None and not prev.takes_value:
            return i
    return hits[0] if len(hits) == 1 else None
