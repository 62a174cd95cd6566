"""Replay stub of ``msgspec``: ``Struct`` subclasses become dataclasses with the same options."""

from __future__ import annotations

import dataclasses
import json as _json
from typing import Any

from _replay_stubkit import VERSIONS, module_getattr

from . import structs  # noqa: F401

__version__ = VERSIONS["msgspec"]
__replay_stub__ = True
__getattr__ = module_getattr("msgspec")

_DC_OPTIONS = ("frozen", "kw_only", "eq", "order")


class Struct:
    """``class X(msgspec.Struct, frozen=True, kw_only=True)`` -> a dataclass."""

    __replay_stub__ = True

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__()
        kwargs = {k: v for k, v in options.items() if k in _DC_OPTIONS}
        kwargs.setdefault("kw_only", bool(options.get("kw_only", False)))
        dataclasses.dataclass(cls, **kwargs)  # type: ignore[call-overload]
        if options.get("frozen") or kwargs.get("frozen"):
            cls.__hash__ = object.__hash__  # type: ignore[method-assign]


class ValidationError(ValueError):
    pass


class DecodeError(ValueError):
    pass


class EncodeError(ValueError):
    pass


UNSET: Any = None


def field(*, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING,
          name: str | None = None) -> Any:
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory)
    return dataclasses.field(default=default)


def to_builtins(obj: Any, **_: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_builtins(v) for k, v in dataclasses.asdict(obj).items()}
    return obj


def convert(obj: Any, type: Any, **_: Any) -> Any:  # noqa: A002 - msgspec's name
    if isinstance(obj, dict) and dataclasses.is_dataclass(type):
        return type(**obj)
    return obj


class _Json:
    @staticmethod
    def encode(obj: Any, **_: Any) -> bytes:
        return _json.dumps(to_builtins(obj), default=str).encode()

    @staticmethod
    def decode(data: Any, **_: Any) -> Any:
        return _json.loads(data)


json = _Json()
