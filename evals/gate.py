"""The CI gate: the engine's aggregate metrics against ``thresholds.json``.

``thresholds.json`` holds ``{"system": "engine", "min": {metric: value},
"max": {metric: value}}``. Thresholds only ever go up (``min``) or down
(``max``): raise them when the engine improves, never lower them to let a
regression through, and never edit incidents to pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evals.runner import EvalReport

THRESHOLDS = Path(__file__).resolve().parent / "thresholds.json"


def load_thresholds(path: str | Path | None = None) -> dict[str, Any]:
    return json.loads(Path(path or THRESHOLDS).read_text(encoding="utf-8"))


def check_gate(report: EvalReport, thresholds: dict[str, Any] | None = None) -> list[str]:
    """Failures as readable lines (empty: the gate holds)."""
    th = thresholds if thresholds is not None else load_thresholds()
    name = th.get("system", "engine")
    system = report.systems.get(name)
    if system is None:
        return [f"the report has no system {name!r}"]
    agg = system.aggregate
    failures: list[str] = []
    for metric, floor in (th.get("min") or {}).items():
        value = agg.get(metric)
        if value is None:
            failures.append(f"{name}.{metric}: not measured (threshold >= {floor})")
        elif value < floor:
            failures.append(f"{name}.{metric}: {value} < {floor}")
    for metric, ceiling in (th.get("max") or {}).items():
        value = agg.get(metric)
        if value is None:
            failures.append(f"{name}.{metric}: not measured (threshold <= {ceiling})")
        elif value > ceiling:
            failures.append(f"{name}.{metric}: {value} > {ceiling}")
    return failures


__all__ = ["THRESHOLDS", "check_gate", "load_thresholds"]
