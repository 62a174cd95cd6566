"""A release's option table, read from its own parser, for the parent's argv filter.

:func:`option_table` returns the :class:`~service.replay.argv_guard.OptionTable` of the
parser that ``prepare_server_args`` builds in that release: every option string with its
destination and ``nargs``, whether abbreviations are allowed, which options are required.
It is read once per release tree by a sandboxed child (``dump_options`` of
``child/guard.py``: the release is imported as for a replay, the parser is built and
inspected, no command line is parsed) and kept in ``<home>/replay-options/``. Static catalogs (the KB's) are not used:
argparse's prefix matching depends on every option string the real parser holds.
When the table cannot be read, None: the caller falls back to
:data:`service.replay.plan.FALLBACK_OPTIONS` and says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.replay.argv_guard import OptionTable

__all__ = ["from_dump", "option_table"]

#: bump when the dump's format changes
_FORMAT = 1
_LOCK = threading.Lock()  # the tables below
_READ_LOCK = threading.Lock()  # one read (file or sandboxed dump) at a time
_MEMO: dict[str, OptionTable] = {}
_RUNNING: dict[str, threading.Event] = {}  # background reads (callers with a deadline)
_FAILED: set[str] = set()  # trees whose parser could not be read (not retried here)


def _key(tree: Path) -> str:
    server_args = tree / "sglang" / "srt" / "server_args.py"
    try:
        st = server_args.stat()
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = "missing"
    return hashlib.sha256(f"{_FORMAT}:{tree.resolve()}:{stamp}".encode()).hexdigest()[:20]


def from_dump(dump: dict[str, Any]) -> OptionTable:
    """The table of a ``dump_options`` answer (``child/guard.py``; ``ValueError`` if bad)."""
    options = dump.get("options")
    if not isinstance(options, dict) or not options:
        raise ValueError("no options in the dump")
    table = {str(k): (str(v[0]), str(v[1])) for k, v in options.items()}
    required = frozenset(str(v[0]) for v in options.values() if len(v) > 2 and v[2])
    return OptionTable(
        table,
        allow_abbrev=bool(dump.get("allow_abbrev", True)),
        prefix_chars=str(dump.get("prefix_chars") or "-"),
        negative_number_options=bool(dump.get("negative_number_options")),
        required=required,
        source="parser",
    )


def option_table(
    tree: Path, home: Path, dump: Callable[[], dict[str, Any] | None], wait_s: float | None = None
) -> OptionTable | None:
    """The release's option table: memory, then ``<home>/replay-options/``, else ``dump()``
    (a sandboxed run, see the module docstring) whose answer is stored. None when the dump
    fails, or when a caller with a deadline (``wait_s``: at most that many seconds) would
    have to wait longer: the read then goes on in the background for the next call."""
    key = _key(tree)
    if wait_s is None:
        return _read(key, home, dump)
    with _LOCK:
        hit = _MEMO.get(key)
        if hit is not None or key in _FAILED:
            return hit
        done = _RUNNING.get(key)
        if done is None:
            done = _RUNNING[key] = threading.Event()

            def run() -> None:
                try:
                    _read(key, home, dump)
                finally:
                    done.set()
                    with _LOCK:
                        _RUNNING.pop(key, None)

            threading.Thread(target=run, name="replay-options", daemon=True).start()
    done.wait(max(0.0, wait_s))
    with _LOCK:
        return _MEMO.get(key)


def _read(key: str, home: Path, dump: Callable[[], dict[str, Any] | None]) -> OptionTable | None:
    with _READ_LOCK:
        with _LOCK:
            hit = _MEMO.get(key)
        if hit is not None or key in _FAILED:
            return hit
        path = home / "replay-options" / f"{key}.json"
        table = None
        with contextlib.suppress(OSError, ValueError, TypeError, IndexError):
            table = from_dump(json.loads(path.read_text()))
        if table is None:
            raw = dump()
            try:
                table = from_dump(raw or {})
            except (ValueError, TypeError, IndexError):
                with _LOCK:
                    _FAILED.add(key)
                return None
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(raw))
            os.replace(tmp, path)
        with _LOCK:
            _MEMO[key] = table
        return table
