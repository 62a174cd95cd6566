"""Replay stub of ``dill``: ``pickle`` under dill's names (SGLang pickles classes by reference)."""

from __future__ import annotations

import pickle
from typing import Any

from _replay_stubkit import module_getattr

__version__ = "0.4.0"
__replay_stub__ = True
__getattr__ = module_getattr("dill")

HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
PicklingError = pickle.PicklingError
UnpicklingError = pickle.UnpicklingError


def dumps(obj: Any, protocol: int | None = None, **_: Any) -> bytes:
    return pickle.dumps(obj, protocol=protocol)


def loads(data: bytes, **_: Any) -> Any:
    return pickle.loads(data)


def dump(obj: Any, file: Any, protocol: int | None = None, **_: Any) -> None:
    pickle.dump(obj, file, protocol=protocol)


def load(file: Any, **_: Any) -> Any:
    return pickle.load(file)
