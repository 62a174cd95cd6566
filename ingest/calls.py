"""Call sites with their guards, found once at ingest so that query time never parses.

A check only runs when its function is called, under the guards of the call
(``if self.speculative_algorithm == "EAGLE": self._handle_eagle()``); from
0.5.19 the resolution pipeline calls hooks indirectly, ``run_hook(fn, args)``
and ``run_post_process_pass(view, fn)``. :func:`ingest.checks.callee_name` is the one
place that decides which function a call runs; :func:`extract_calls` records, per
file, the call sites the engine reads back with :meth:`kb.store.Store.calls`:

* in the validation files (:data:`kb.store.VALIDATION_PREFIXES`), every call
  with a name, since hooks call each other across files;
* elsewhere, in files that hold a check, the calls of the file's own functions
  (a check's function and the callers above it).
"""

from __future__ import annotations

import json

from tree_sitter import Node

from ingest import ts
from ingest.checks import callee_name, guards_of
from ingest.chunker import FunctionInfo
from kb.store import VALIDATION_PREFIXES

__all__ = ["extract_calls"]


def extract_calls(
    v: str, path: str, root: Node, functions: list[FunctionInfo], has_checks: bool, enclosing
) -> list[tuple]:
    """``calls`` rows of one file (see the module docstring), in source order.

    ``enclosing(line)`` gives the innermost function holding ``line`` (or None)."""
    surface = path.startswith(VALIDATION_PREFIXES)
    if not surface and not has_checks:
        return []
    own = {f.name for f in functions}
    rows: list[tuple] = []
    # captures come in no stable order: source order keeps "the first call site" stable
    for call in sorted(ts.captures("(call) @c", root).get("c", []), key=lambda n: n.start_byte):
        name = callee_name(call)
        if not name or (not surface and name not in own):
            continue
        line = ts.start_line(call)
        fn = enclosing(line)
        rows.append(
            (
                v,
                path,
                name,
                fn.qualname if fn else "<module>",
                fn.start_line if fn else None,
                line,
                json.dumps([g.as_dict() for g in guards_of(call)]),
            )
        )
    return rows
