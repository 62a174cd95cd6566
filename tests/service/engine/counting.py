"""Counting the calls a test makes of one function: memo tests bound work by counts, not by
wall-clock time."""

from __future__ import annotations

from typing import Any

import pytest


def calls_of(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """A counter (``[n]``, reset by assigning ``[0]``) of the calls of ``module.name`` from
    now on: the function is replaced by one that counts and calls it."""
    calls = [0]
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls
