"""Replay stub of ``triton.language``: ``constexpr`` and dtype names."""

from __future__ import annotations

from typing import Any

from _replay_stubkit import module_getattr

__replay_stub__ = True
__getattr__ = module_getattr("triton.language")


class constexpr:
    """``tl.constexpr``: used as an annotation and as a wrapper."""

    def __init__(self, value: Any = None) -> None:
        self.value = value


class dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"triton.language.{self.name}"


for _n in (
    "float8e4nv",
    "float8e5",
    "float8e4b8",
    "float8e5b16",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int1",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
):
    globals()[_n] = dtype(_n)


def gather(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("replay stub: triton kernels cannot run")
