"""The eval's warm-pool head start (:class:`evals.replay_check.Prewarmer`): the next
(release, machine) group's worker is started only when the current group needed the pool
(the replay cache did not answer it whole), once per group, and only after the current
group's own worker was used (so the pool keeps it)."""

from __future__ import annotations

import pytest

import evals.replay_check as replay_check
from evals.replay_check import Prewarmer

GROUPS = [("0.5.9", "h100-x8")] * 3 + [("0.5.11", "b200-x8")] * 2 + [("0.5.23", "a100-x8")]


def _run(monkeypatch: pytest.MonkeyPatch, misses: set[int]) -> list[tuple[str, str | None]]:
    """Answer GROUPS in order; the answers at ``misses`` send one job to the pool. Returns
    the calls made, in order: ``("answer", position)`` and ``("prewarm", release)``."""
    served = [0]
    calls: list[tuple[str, str | None]] = []
    monkeypatch.setattr(replay_check, "pool_jobs_served", lambda: served[0])
    monkeypatch.setattr(
        replay_check, "prewarm", lambda settings, release, hw: calls.append(("prewarm", release))
    )
    warm = Prewarmer(None, GROUPS)  # type: ignore[arg-type]
    for at in range(len(GROUPS)):
        warm.before(at)
        calls.append(("answer", str(at)))
        served[0] += at in misses
        warm.after(at)
    assert [g[0] for g in warm.started] == [c[1] for c in calls if c[0] == "prewarm"]
    return calls


def test_a_replay_cache_answering_everything_starts_no_worker(monkeypatch) -> None:
    assert not [c for c in _run(monkeypatch, set()) if c[0] == "prewarm"]


def test_each_group_that_needs_the_pool_starts_the_next_once(monkeypatch) -> None:
    calls = _run(monkeypatch, {0, 1, 2, 3, 4, 5})
    assert [c for c in calls if c[0] == "prewarm"] == [("prewarm", "0.5.11"), ("prewarm", "0.5.23")]
    # after the group's first answer (its own worker used), never before it
    assert calls.index(("prewarm", "0.5.11")) == calls.index(("answer", "0")) + 1
    assert calls.index(("prewarm", "0.5.23")) == calls.index(("answer", "3")) + 1


def test_only_a_group_that_missed_the_cache_starts_the_next(monkeypatch) -> None:
    calls = _run(monkeypatch, {4})
    assert [c for c in calls if c[0] == "prewarm"] == [("prewarm", "0.5.23")]
    assert calls.index(("prewarm", "0.5.23")) == calls.index(("answer", "4")) + 1
