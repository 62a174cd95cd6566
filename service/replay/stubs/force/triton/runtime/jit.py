"""Replay stub of ``triton.runtime.jit``: real classes, so ``isinstance`` checks (torch's) work."""

from __future__ import annotations

from typing import Any

from _replay_stubkit import module_getattr

__replay_stub__ = True
__getattr__ = module_getattr("triton.runtime.jit")


class KernelInterface:
    """Base of triton kernels; launching one is impossible here."""

    def __getitem__(self, grid: Any) -> Any:
        raise NotImplementedError("replay stub: triton kernels cannot run")


class JITFunction(KernelInterface):
    def __init__(self, fn: Any, **options: Any) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")


def jit(fn: Any = None, **options: Any) -> Any:
    return (lambda f: f) if fn is None else fn
