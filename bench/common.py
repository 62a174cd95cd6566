"""Helpers the benchmark scripts share."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def test_kb_dir() -> Path:
    """The test suite's KB: ``TRIAGE_TEST_KB``, else ``<TRIAGE_HOME or cache>/test-kb``
    (the folder ``tests/conftest.py`` ingests into)."""
    from service.settings import Settings

    return Path(os.environ.get("TRIAGE_TEST_KB", Settings().home / "test-kb"))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0..1) of ``values``, in their unit, to 0.01; None if empty."""
    if not values:
        return None
    vals = sorted(values)
    return round(vals[min(len(vals) - 1, int(q * len(vals)))], 2)
