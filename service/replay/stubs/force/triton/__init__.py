"""Replay stub of ``triton`` (GPU-only): decorators that return the function, a fake driver."""

from __future__ import annotations

from typing import Any

from _replay_stubkit import VERSIONS, module_getattr

from . import language, runtime  # noqa: F401

__version__ = VERSIONS["triton"]
__replay_stub__ = True
__getattr__ = module_getattr("triton")


class Config:
    """``triton.Config(kwargs, num_warps=..., num_stages=...)``."""

    def __init__(self, kwargs: dict[str, Any] | None = None, **options: Any) -> None:
        self.kwargs = dict(kwargs or {})
        self.options = options


def jit(fn: Any = None, **options: Any) -> Any:
    """``@triton.jit`` and ``@triton.jit(...)``: the function itself."""
    if fn is None:
        return lambda f: f
    return fn


def autotune(
    configs: Any = None,
    key: Any = None,
    prune_configs_by: Any = None,
    reset_to_zero: Any = None,
    restore_value: Any = None,
    pre_hook: Any = None,
    post_hook: Any = None,
    warmup: Any = None,
    rep: Any = None,
    use_cuda_graph: bool = False,
    do_bench: Any = None,
    cache_results: bool = False,
) -> Any:
    """``@triton.autotune(...)``: a no-op decorator."""
    return lambda f: f


def heuristics(values: Any = None) -> Any:
    """``@triton.heuristics(...)``: a no-op decorator."""
    return lambda f: f


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
