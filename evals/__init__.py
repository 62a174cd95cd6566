"""The eval suite: recorded incidents, the runner, scoring, baselines, generators, reports.

Imports the engine's public API, :mod:`service.replay` and :mod:`kb`. ``sglang-triage
eval`` and ``export-incidents`` are registered through the ``sglang_triage.commands``
entry point (:func:`evals.cli.register`).
"""

__all__ = [
    "baselines",
    "cli",
    "confirm",
    "gate",
    "generate",
    "groundtruth",
    "incidents",
    "reports",
    "runner",
    "scoring",
    "seed",
    "snapshot",
]
