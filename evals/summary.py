"""The eval report and how per-incident scores add up (see :mod:`evals.runner`).

:class:`EvalReport` holds one :class:`SystemReport` per system (``engine``, ``grep``,
``rag``): its :class:`IncidentScore` list, the :func:`aggregate` (means over the incidents
where a metric applies, latency p50/p95) and the same by category, by release (the
incident's ``expected.release``; :data:`NOT_INGESTED` when it is null) and by start-up
check family. With variants (:mod:`evals.variants`) it also holds the aggregate per
variant and the :func:`reliability` table (answers bucketed by stated confidence).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from evals.incidents import Incident
from evals.scoring import METRICS, ROBUST_METRICS
from kb.versions import VersionKey, parse_version, version_key

__all__ = [
    "BUCKETS",
    "NOT_INGESTED",
    "EvalReport",
    "IncidentScore",
    "SystemReport",
    "aggregate",
    "family_variant_sections",
    "release_group",
    "release_order",
    "reliability",
    "system_report",
    "variant_sections",
]

#: the by-release group of incidents whose crash release is not ingested (expected.release null)
NOT_INGESTED = "not ingested"


class IncidentScore(BaseModel):
    id: str
    category: str
    source: str
    expected_release: str = NOT_INGESTED
    status: str
    error: str | None = None
    release: str | None = None
    location: str | None = None
    root_cause: list[str] = Field(default_factory=list)
    top_fix: str | None = None
    latency_ms: float
    metrics: dict[str, bool | float | None]
    #: "original", or the variant of :mod:`evals.variants` the incident is
    variant: str = "original"
    #: the answer's stated confidence (``TriageResult.confidence``)
    confidence: float | None = None
    #: what ``fix_ok`` rests on: ``replay``, ``static`` (the recommended fix is an acceptable
    #: fix; replay off or undecided) or ``no_flag``
    fix_basis: str | None = None
    #: the incident's start-up check family (``Incident.family``; :mod:`evals.families`)
    family: str | None = None


class SystemReport(BaseModel):
    name: str
    incidents: list[IncidentScore]
    aggregate: dict[str, float | int | None]
    by_category: dict[str, dict[str, float | int | None]]
    by_release: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)
    #: the aggregate per start-up check family, for the incidents that have one
    by_family: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)


class EvalReport(BaseModel):
    created: str
    target: str
    incidents: int
    systems: dict[str, SystemReport]
    #: with ``variants``: the engine's scores on the variant incidents (:mod:`evals.variants`)
    variant_incidents: list[IncidentScore] = Field(default_factory=list)
    #: the aggregate per variant, ``original`` being the generated incidents they derive from
    by_variant: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)
    #: answers (originals and variants) bucketed by stated confidence: ``{bucket, lo, hi, n,
    #: correct, share}`` with ``share`` the fraction whose location is right
    reliability: list[dict[str, Any]] = Field(default_factory=list)
    #: with variants of family incidents: family -> variant (``original`` first) -> aggregate
    by_family_variant: dict[str, dict[str, dict[str, float | int | None]]] = Field(
        default_factory=dict
    )

    @property
    def engine(self) -> SystemReport:
        return self.systems["engine"]


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    vals = sorted(values)
    if len(vals) == 1:
        return round(vals[0], 1)
    return round(statistics.quantiles(vals, n=100, method="inclusive")[int(q) - 1], 1)


def aggregate(scores: list[IncidentScore]) -> dict[str, float | int | None]:
    """Means of each metric over the incidents where it applies; latency p50/p95."""
    out: dict[str, float | int | None] = {
        "n": len(scores),
        "errors": sum(1 for s in scores if s.error),
    }
    for m in METRICS + ROBUST_METRICS:
        vals = [float(s.metrics[m]) for s in scores if s.metrics.get(m) is not None]
        out[m] = round(sum(vals) / len(vals), 4) if vals else None
        out[f"{m}_n"] = len(vals)
    lat = [s.latency_ms for s in scores]
    out["latency_p50_ms"] = _percentile(lat, 50)
    out["latency_p95_ms"] = _percentile(lat, 95)
    return out


def release_group(incident: Incident) -> str:
    """The by-release group of ``incident``: the ingested release its answer refers to."""
    return incident.expected.release or NOT_INGESTED


def release_order(name: str) -> tuple[bool, VersionKey]:
    """Sort key of release groups: versions in release order (:func:`kb.versions.version_key`),
    :data:`NOT_INGESTED` (and any other name that is not a version) last."""
    return (parse_version(name) is None, version_key(name))


def _groups(
    scores: list[IncidentScore],
    key: Callable[[IncidentScore], str],
    order: Callable[[str], Any] = str,
) -> dict[str, dict[str, float | int | None]]:
    groups: dict[str, list[IncidentScore]] = {}
    for s in scores:
        groups.setdefault(key(s), []).append(s)
    return {g: aggregate(groups[g]) for g in sorted(groups, key=order)}


def system_report(name: str, scores: list[IncidentScore]) -> SystemReport:
    """The report of system ``name``: its ``scores``, their :func:`aggregate` and the same
    by category, by release (versions in order) and by start-up check family."""
    return SystemReport(
        name=name,
        incidents=scores,
        aggregate=aggregate(scores),
        by_category=_groups(scores, lambda s: s.category),
        by_release=_groups(scores, lambda s: s.expected_release, release_order),
        by_family=_groups([s for s in scores if s.family], _family, _family_order),
    )


#: confidence buckets of the reliability table: [lo, hi) (the last one holds 1.0)
BUCKETS: tuple[tuple[float, float], ...] = ((0.0, 0.5), (0.5, 0.8), (0.8, 0.9), (0.9, 1.0))


def reliability(scores: Sequence[IncidentScore]) -> list[dict[str, Any]]:
    """Answers bucketed by stated confidence against whether their location is right
    (``location_ok``); answers without a confidence or a scored location are left out."""
    out: list[dict[str, Any]] = []
    for k, (lo, hi) in enumerate(BUCKETS):
        last = k == len(BUCKETS) - 1
        inside = [
            s
            for s in scores
            if s.confidence is not None
            and s.metrics.get("location_ok") is not None
            and lo <= s.confidence
            and (s.confidence < hi or (last and s.confidence <= hi))
        ]
        right = sum(1 for s in inside if s.metrics["location_ok"])
        out.append(
            {
                "bucket": f"[{lo:.1f}, {hi:.1f}{']' if last else ')'}",
                "lo": lo,
                "hi": hi,
                "n": len(inside),
                "correct": right,
                "share": round(right / len(inside), 4) if inside else None,
            }
        )
    return out


def variant_sections(
    originals: Sequence[IncidentScore], variants: Sequence[IncidentScore]
) -> tuple[dict[str, dict[str, float | int | None]], list[dict[str, Any]]]:
    """``by_variant`` (``original``: the incidents variants were derived from, then each
    variant in :data:`evals.variants.VARIANTS` order) and the reliability table over both."""
    from evals.variants import SEP, VARIANTS

    bases = {s.id.split(SEP, 1)[0] for s in variants}
    base = [s for s in originals if s.id in bases]
    groups: dict[str, list[IncidentScore]] = {"original": base}
    for s in variants:
        groups.setdefault(s.variant, []).append(s)
    order = ["original", *VARIANTS]
    by = {
        g: aggregate(groups[g])
        for g in sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g))
    }
    return by, reliability([*base, *variants])


def _family(s: IncidentScore) -> str:
    return s.family or ""


def _family_order(name: str) -> tuple[int, str]:
    from evals.families import FAMILIES

    return (FAMILIES.index(name) if name in FAMILIES else len(FAMILIES), name)


def family_variant_sections(
    originals: Sequence[IncidentScore], variants: Sequence[IncidentScore]
) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """family -> variant -> aggregate, for the family incidents variants were made of."""
    out: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for family in sorted({s.family for s in originals if s.family}, key=_family_order):
        by, _ = variant_sections(
            [s for s in originals if s.family == family],
            [s for s in variants if s.family == family],
        )
        out[family] = by
    return out
