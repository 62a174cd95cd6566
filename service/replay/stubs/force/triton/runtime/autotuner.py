"""Replay stub of ``triton.runtime.autotuner``."""

from __future__ import annotations

from _replay_stubkit import module_getattr

from .jit import KernelInterface

__replay_stub__ = True
__getattr__ = module_getattr("triton.runtime.autotuner")


class Autotuner(KernelInterface):
    pass


class Heuristics(KernelInterface):
    pass
