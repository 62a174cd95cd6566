"""ServerArgs fields as JSON, for the replay child (a script of the sandbox, stdlib only).

Imported by name by ``runner.py`` and ``probe_state.py`` inside the sandbox (this folder
is ``sys.path[0]``) and as ``service.replay.child.values`` by unit tests: :func:`dump_fields`
renders the final ServerArgs of a replay, :func:`json_safe` one field value (enums by value, dataclasses as
dicts, sets sorted, anything else as a short ``repr``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from pathlib import Path
from typing import Any

__all__ = ["dump_fields", "json_safe"]


def json_safe(value: Any, depth: int = 0) -> Any:
    """A JSON-serialisable rendering of a ServerArgs field value."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else str(value)
        )
    if isinstance(value, enum.Enum):
        return json_safe(value.value, depth + 1)
    if depth > 6:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [json_safe(v, depth + 1) for v in items]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: json_safe(getattr(value, f.name, None), depth + 1)
            for f in dataclasses.fields(value)
        }
    if isinstance(value, Path):
        return str(value)
    return repr(value)[:200]


def dump_fields(server_args: Any) -> dict[str, Any]:
    """Every field of the final ServerArgs, JSON-safe.

    0.5.19+ keeps the record as the user's input and resolves into a separate
    view; its ``resolved_dict()`` is what the server would run with.
    """
    resolved = getattr(server_args, "resolved_dict", None)
    if callable(resolved):
        with contextlib.suppress(Exception):
            return {str(k): json_safe(v) for k, v in resolved().items()}
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(server_args):
        names = [f.name for f in dataclasses.fields(server_args)]
    else:
        names = list(getattr(type(server_args), "__struct_fields__", ())) or sorted(
            vars(server_args)
        )
    for name in names:
        try:
            out[name] = json_safe(getattr(server_args, name))
        except Exception as exc:
            out[name] = f"<unreadable: {type(exc).__name__}>"
    return out
