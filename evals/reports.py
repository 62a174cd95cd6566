"""Write an :class:`~evals.summary.EvalReport` as JSON, markdown and a PNG plot."""

from __future__ import annotations

import json
from pathlib import Path

from evals.scoring import METRICS, missed
from evals.summary import EvalReport, SystemReport

LABELS = {
    "release_at_1": "release@1",
    "exact_location": "exact location",
    "function_match": "function",
    "rc_precision": "root-cause P",
    "rc_recall": "root-cause R",
    "fix_valid": "fix valid",
    "fix_match": "fix matches (top-3)",
    "no_fix_declined": "no-fix declined",
    "grounded": "grounded",
    "fix_replay": "fix passes replay",
    "no_fix": "no fix (share)",
    "keeps_features": "keeps feature flags",
    "keeps_all_features": "keeps every feature flag",
    "upgrade_said": "upgrade said",
    "not_flag_said": "not-a-flag-problem said",
    "location_ok": "location right",
    "fix_ok": "fix right",
}
PLOTTED = ("exact_location", "function_match", "rc_recall", "fix_match")


def _fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}" if value <= 1.0 else f"{value:.1f}"
    return str(value)


def markdown(report: EvalReport) -> str:
    """A summary table per system, per category for the engine, and the misses."""
    names = list(report.systems)
    lines = [
        f"# sglang-triage eval — {report.incidents} incidents",
        "",
        f"Target: {report.target} · {report.created}",
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for m in METRICS:
        cells = []
        for n in names:
            agg = report.systems[n].aggregate
            cells.append(
                f"{_fmt(agg.get(m))} (n={agg.get(f'{m}_n', 0)})" if agg.get(m) is not None else "–"
            )
        lines.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
    for key in ("latency_p50_ms", "latency_p95_ms", "errors"):
        lines.append(
            f"| {key} | "
            + " | ".join(_fmt(report.systems[n].aggregate.get(key)) for n in names)
            + " |"
        )
    eng = report.systems.get("engine")
    if eng is not None:
        for title, groups in (("category", eng.by_category), ("release", eng.by_release)):
            lines += [
                "",
                f"## Engine by {title}",
                "",
                f"| {title} | n | " + " | ".join(LABELS[m] for m in METRICS) + " | p95 ms |",
                "|---|---|" + "---|" * (len(METRICS) + 1),
            ]
            for group, agg in groups.items():
                lines.append(
                    f"| {group} | {agg['n']} | "
                    + " | ".join(_fmt(agg.get(m)) for m in METRICS)
                    + f" | {_fmt(agg.get('latency_p95_ms'))} |"
                )
        misses = [
            s for s in eng.incidents if s.error or any(missed(k, v) for k, v in s.metrics.items())
        ]
        if misses:
            lines += [
                "",
                "## Engine misses",
                "",
                "| incident | status | location | missed |",
                "|---|---|---|---|",
            ]
            for s in misses:
                which = ", ".join(LABELS[k] for k, v in s.metrics.items() if missed(k, v))
                lines.append(f"| {s.id} | {s.error or s.status} | {s.location or '–'} | {which} |")
    lines += variant_markdown(report)
    return "\n".join(lines) + "\n"


def variant_markdown(report: EvalReport) -> list[str]:
    """The by-variant and reliability sections (empty when no variants were run)."""
    if not report.by_variant:
        return []
    lines = [
        "",
        "## Engine by variant",
        "",
        "Location right: exact, an equivalent, or the same check in a release range "
        "holding the expected release. Fix right: replay passes the recommended fix "
        "(static match with an acceptable fix when replay did not decide), or the "
        "expected upgrade / no-flag answer.",
        "",
        "| variant | n | location right | n | fix right | n | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, agg in report.by_variant.items():
        lines.append(
            f"| {name} | {agg['n']} | {_fmt(agg.get('location_ok'))} | "
            f"{agg.get('location_ok_n', 0)} | {_fmt(agg.get('fix_ok'))} | "
            f"{agg.get('fix_ok_n', 0)} | {agg.get('errors', 0)} |"
        )
    lines += [
        "",
        "## Reliability (stated confidence vs location right)",
        "",
        "| confidence | n | right | share |",
        "|---|---|---|---|",
    ]
    for row in report.reliability:
        lines.append(f"| {row['bucket']} | {row['n']} | {row['correct']} | {_fmt(row['share'])} |")
    misses = [
        s
        for s in report.variant_incidents
        if s.error or s.metrics.get("location_ok") is False or s.metrics.get("fix_ok") is False
    ]
    if misses:
        lines += [
            "",
            "## Variant misses",
            "",
            "| incident | status | release | location | conf | location right | fix right |",
            "|---|---|---|---|---|---|---|",
        ]
        for s in misses:
            lines.append(
                f"| {s.id} | {s.error or s.status} | {s.release or '–'} | "
                f"{s.location or '–'} | {_fmt(s.confidence)} | "
                f"{_fmt(s.metrics.get('location_ok'))} | {_fmt(s.metrics.get('fix_ok'))} |"
            )
    return lines


def plot(report: EvalReport, path: Path) -> Path:
    """Bars of the main metrics by category, one group per system (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems: list[SystemReport] = list(report.systems.values())
    cats = sorted({c for s in systems for c in s.by_category})
    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4.2 * len(PLOTTED), 4.2), sharey=True)
    width = 0.8 / max(1, len(systems))
    for ax, metric in zip(axes, PLOTTED, strict=True):
        for k, system in enumerate(systems):
            vals = [system.by_category.get(c, {}).get(metric) for c in cats]
            xs = [i + k * width for i in range(len(cats))]
            ax.bar(xs, [v if v is not None else 0.0 for v in vals], width, label=system.name)
        ax.set_title(LABELS[metric])
        ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(cats))])
        ax.set_xticklabels(cats, rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 1.05)
    axes[0].set_ylabel("mean over incidents where it applies")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"sglang-triage eval: {report.incidents} incidents")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_reports(report: EvalReport, out_dir: str | Path) -> dict[str, Path]:
    """``report.json``, ``report.md`` and ``metrics_by_category.png`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "report.json",
        "markdown": out / "report.md",
        "plot": out / "metrics_by_category.png",
    }
    paths["json"].write_text(json.dumps(report.model_dump(mode="json"), indent=1), encoding="utf-8")
    paths["markdown"].write_text(markdown(report), encoding="utf-8")
    plot(report, paths["plot"])
    return paths


__all__ = ["markdown", "plot", "variant_markdown", "write_reports"]
