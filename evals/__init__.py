"""The eval suite: recorded incidents, the runner, scoring, baselines, generators, reports.

``runner`` answers incidents and scores them (``scoring``; fixes compared by ``fix_match``)
into the report of ``summary``; ``generate`` makes incidents whose ground truth
``groundtruth`` computes (values tried: ``probe_values``; check order: ``check_order``).

Imports the engine's public API, :mod:`service.replay` and :mod:`kb`. ``sglang-triage
eval`` and ``export-incidents`` are registered through the ``sglang_triage.commands``
entry point (:func:`evals.cli.register`).
"""

__all__ = [
    "baselines",
    "check_order",
    "cli",
    "confirm",
    "gate",
    "generate",
    "groundtruth",
    "fix_match",
    "incidents",
    "probe_values",
    "reports",
    "runner",
    "scoring",
    "seed",
    "snapshot",
    "summary",
]
