"""Replay stub of ``msgspec.json`` on top of the standard ``json``."""

from __future__ import annotations

import json as _json
from typing import Any

from _replay_stubkit import module_getattr

__replay_stub__ = True
__getattr__ = module_getattr("msgspec.json")


def encode(obj: Any, *, enc_hook: Any = None, order: Any = None) -> bytes:
    from msgspec import to_builtins

    return _json.dumps(to_builtins(obj, enc_hook=enc_hook), default=repr).encode()


def decode(data: Any, *, type: Any = Any, strict: bool = True, dec_hook: Any = None) -> Any:
    from msgspec import DecodeError, convert

    try:
        value = _json.loads(data)
    except ValueError as exc:
        raise DecodeError(str(exc)) from exc
    return value if type is Any else convert(value, type)


class Encoder:
    def __init__(self, *, enc_hook: Any = None, **_: Any) -> None:
        self.enc_hook = enc_hook

    def encode(self, obj: Any) -> bytes:
        return encode(obj, enc_hook=self.enc_hook)


class Decoder:
    def __init__(self, type: Any = Any, **_: Any) -> None:
        self.type = type

    def decode(self, data: Any) -> Any:
        return decode(data, type=self.type)
