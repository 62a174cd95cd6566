"""The CI gate: the engine's metrics against ``thresholds.json``, overall and per release.

``thresholds.json`` holds ``{"system": "engine", "min": {metric: value},
"max": {metric: value}, "per_release": {"min_n": N}}``. Thresholds only ever go
up (``min``) or down (``max``): raise them when the engine improves, never lower
them to let a regression through, and never edit incidents to pass.

The same thresholds apply to every release's own aggregate (the report's
``by_release``, grouped by ``expected.release``), so a release cannot hide
behind the others' average, where the release has **enough incidents** for
the threshold to mean the same thing it means overall (:func:`applies`):

* at least ``per_release.min_n`` incidents scored on the metric, and
* for a floor below 1, enough that a single miss alone does not break it
  (``(n - 1) / n >= floor``, i.e. ``n >= 1 / (1 - floor)``: 20 for 0.95, 34
  for 0.97). With fewer, the floor would silently turn into "no miss at all",
  a stricter gate than the global one. Floors of 1.0 (and the error count) mean
  "no miss" at any size, so they apply from ``min_n`` on.

Per-release values a threshold does not apply to are still reported
(:func:`release_advisories`), never hidden.

When the report holds variants (``sglang-triage eval --variants``, :mod:`evals.variants`),
``thresholds.json``'s ``variants`` section applies too (:func:`variant_breaches`):
``min`` holds per variant floors of ``location_ok`` and ``fix_ok`` (the aggregate of
``by_variant``), checked for the variants that were run, and ``high_confidence`` a floor
of the share of answers stated with confidence >= 0.8 whose location is right (the
reliability table).

Family incidents (:mod:`evals.families`: crashes past argument validation, scored apart
with ``thresholds_families.json``) are gated per family (:func:`family_breaches`): the
``families`` section maps ``original`` and each variant to ``{family: {metric: floor}}``,
checked against the engine's ``by_family`` (originals) and the report's
``by_family_variant`` (variants that were run).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals.summary import NOT_INGESTED, EvalReport

THRESHOLDS = Path(__file__).resolve().parent / "thresholds.json"
#: the family incidents' own thresholds (``families`` section only)
FAMILY_THRESHOLDS = THRESHOLDS.with_name("thresholds_families.json")
#: per-release minimum number of scored incidents when thresholds.json names none
DEFAULT_MIN_N = 10
#: the stated confidence from which an answer must be right >= the ``high_confidence`` floor
HIGH_CONFIDENCE = 0.8


def load_thresholds(path: str | Path | None = None) -> dict[str, Any]:
    return json.loads(Path(path or THRESHOLDS).read_text(encoding="utf-8"))


def applies(metric: str, bound: float, n: int, min_n: int, *, floor: bool) -> bool:
    """Does a threshold apply to one release's value measured on ``n`` incidents?"""
    if n < min_n or n <= 0:
        return False
    if not floor or bound >= 1.0:
        return True
    return (n - 1) / n >= bound


def _n(agg: dict[str, Any], metric: str) -> int:
    """How many incidents a metric of ``agg`` was measured on."""
    return int(agg.get(f"{metric}_n", agg.get("n", 0)) or 0)


def _breaches(
    label: str,
    agg: dict[str, Any],
    th: dict[str, Any],
    keep: Callable[[str, float, bool], bool] | None = None,
) -> list[str]:
    """Threshold breaches of ``agg``; ``keep`` (per release) picks the thresholds that apply,
    and a value not measured there is no breach."""
    out: list[str] = []
    for kind, sign in (("min", "<"), ("max", ">")):
        for metric, bound in (th.get(kind) or {}).items():
            if keep is not None and not keep(metric, bound, kind == "min"):
                continue
            value = agg.get(metric)
            if value is None:
                if keep is None:  # overall: every threshold must be measured
                    out.append(
                        f"{label}.{metric}: not measured (threshold "
                        f"{'>=' if kind == 'min' else '<='} {bound})"
                    )
                continue
            if (value < bound) if kind == "min" else (value > bound):
                n = "" if keep is None else f" (n={_n(agg, metric)})"
                out.append(f"{label}.{metric}: {value} {sign} {bound}{n}")
    return out


def _releases(report: EvalReport, name: str) -> dict[str, dict[str, Any]]:
    system = report.systems[name]
    return {r: a for r, a in system.by_release.items() if r != NOT_INGESTED}


def check_gate(report: EvalReport, thresholds: dict[str, Any] | None = None) -> list[str]:
    """Failures as readable lines (empty: the gate holds), overall then per release."""
    th = thresholds if thresholds is not None else load_thresholds()
    name = th.get("system", "engine")
    system = report.systems.get(name)
    if system is None:
        return [f"the report has no system {name!r}"]
    failures = _breaches(name, system.aggregate, th)
    min_n = int((th.get("per_release") or {}).get("min_n", DEFAULT_MIN_N))
    for release, agg in _releases(report, name).items():

        def keep(metric: str, bound: float, floor: bool, agg: dict[str, Any] = agg) -> bool:
            return applies(metric, bound, _n(agg, metric), min_n, floor=floor)

        failures += _breaches(f"{name}[{release}]", agg, th, keep)
    return failures + variant_breaches(report, th) + family_breaches(report, th)


def family_breaches(report: EvalReport, thresholds: dict[str, Any] | None = None) -> list[str]:
    """Breaches of the ``families`` floors (module docstring); a family or variant the
    report does not hold is not checked, a floor whose metric was not measured is."""
    th = (thresholds if thresholds is not None else load_thresholds()).get("families") or {}
    name = (thresholds or {}).get("system", "engine")
    system = report.systems.get(name)
    if not th or system is None:
        return []
    out: list[str] = []
    for variant, per_family in th.items():
        if variant == "note":
            continue
        for family, floors in per_family.items():
            agg = (
                system.by_family.get(family)
                if variant == "original"
                else (report.by_family_variant.get(family) or {}).get(variant)
            )
            if agg is not None:
                out += _breaches(
                    f"family[{family}]{'' if variant == 'original' else '~' + variant}",
                    agg,
                    {"min": floors},
                )
    return out


def variant_breaches(report: EvalReport, thresholds: dict[str, Any] | None = None) -> list[str]:
    """Breaches of the ``variants`` floors (empty when no variants were run)."""
    th = (thresholds if thresholds is not None else load_thresholds()).get("variants") or {}
    if not report.by_variant or not th:
        return []
    out: list[str] = []
    for variant, floors in (th.get("min") or {}).items():
        agg = report.by_variant.get(variant)
        if agg is None:
            continue  # not run this time
        out += _breaches(f"variant[{variant}]", agg, {"min": floors})
    floor = th.get("high_confidence")
    high = [r for r in report.reliability if float(r["lo"]) >= HIGH_CONFIDENCE]
    n = sum(int(r["n"]) for r in high)
    if floor is not None and n:
        share = round(sum(int(r["correct"]) for r in high) / n, 4)
        if share < float(floor):
            out.append(f"reliability[confidence >= {HIGH_CONFIDENCE}]: {share} < {floor} (n={n})")
    return out


def release_advisories(report: EvalReport, thresholds: dict[str, Any] | None = None) -> list[str]:
    """Per-release values below a floor (above a ceiling) that the gate does not apply
    to, for lack of incidents: reported so that nothing hides behind the rule."""
    th = thresholds if thresholds is not None else load_thresholds()
    name = th.get("system", "engine")
    if name not in report.systems:
        return []
    min_n = int((th.get("per_release") or {}).get("min_n", DEFAULT_MIN_N))
    out: list[str] = []
    for release, agg in _releases(report, name).items():

        def keep(metric: str, bound: float, floor: bool, agg: dict[str, Any] = agg) -> bool:
            return not applies(metric, bound, _n(agg, metric), min_n, floor=floor)

        out += [
            f"{line}, not gated: too few incidents"
            for line in _breaches(f"{name}[{release}]", agg, th, keep)
        ]
    return out


__all__ = [
    "DEFAULT_MIN_N",
    "FAMILY_THRESHOLDS",
    "HIGH_CONFIDENCE",
    "THRESHOLDS",
    "applies",
    "check_gate",
    "family_breaches",
    "load_thresholds",
    "release_advisories",
    "variant_breaches",
]
