"""Replay stub of ``msgspec.structs``."""

from __future__ import annotations

import dataclasses
from typing import Any

from _replay_stubkit import module_getattr

__replay_stub__ = True
__getattr__ = module_getattr("msgspec.structs")


def replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)


def asdict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def astuple(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


def fields(obj: Any) -> tuple[Any, ...]:
    return dataclasses.fields(obj)
