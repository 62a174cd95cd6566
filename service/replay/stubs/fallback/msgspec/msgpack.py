"""Replay stub of ``msgspec.msgpack``: ``pickle`` round-trips (not the msgpack wire format)."""

from __future__ import annotations

import pickle
from typing import Any

from _replay_stubkit import module_getattr

__replay_stub__ = True
__getattr__ = module_getattr("msgspec.msgpack")


class Ext:
    def __init__(self, code: int, data: bytes) -> None:
        self.code, self.data = code, data


def encode(obj: Any, *, enc_hook: Any = None, order: Any = None) -> bytes:
    return pickle.dumps(obj)


def decode(
    data: Any,
    *,
    type: Any = Any,
    strict: bool = True,
    dec_hook: Any = None,
    ext_hook: Any = None,
) -> Any:
    return pickle.loads(data)


class Encoder:
    def __init__(self, **_: Any) -> None:
        pass

    def encode(self, obj: Any) -> bytes:
        return encode(obj)

    def encode_into(self, obj: Any, buffer: bytearray, offset: int = 0) -> None:
        buffer[offset:] = encode(obj)


class Decoder:
    def __init__(self, type: Any = Any, **_: Any) -> None:
        self.type = type

    def decode(self, data: Any) -> Any:
        return decode(data)
