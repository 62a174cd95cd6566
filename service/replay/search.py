"""Replay-backed fix search: let the release's own validation decide what static evaluation
could not, within a deadline, before the answer is returned.

The engine ranks fixes by static evaluation. On the resolution pipeline (0.5.19+) and
wherever a check reads GPU or model facts, it often cannot decide the check or a
candidate (``fixes_check == "unknown"``), or its best statically clean fix is not the
one SGLang accepts. :func:`needs_search` says when that is so; :func:`search_fixes` then
replays the user's command and the candidate fixes (best first, at most
``max_candidates``) on the warm replay pool (:mod:`service.replay.pool`: each command line
costs well under a second once the release's worker runs; over the pool's bound a
candidate is *unverified*) and waits at most ``deadline_s``:

* each replayed fix gets ``replay`` (``verified``, ``next_failure`` or ``unverified``, as
  :func:`service.replay.background.summarise` words it, on the declared hardware);
* fixes are re-ranked: accepted by replay first (in the engine's order), then those not
  decided by replay, then those replay rejected; the **recommended** fix is the first one
  replay accepted. When replay ran and rejected every candidate, nothing is recommended
  and the answer says so; when replay could not decide (harness error, no hardware, past
  the deadline), the engine's own recommendation stands;
* ``fix_search`` on the answer records what happened: ``verified`` (with the release and
  hardware profile), ``rejected``, ``unverified`` (why), ``background`` (the deadline
  passed before any candidate was replayed, e.g. while the release's worker starts: the
  answer goes out as the engine gave it, the worker keeps starting, and the stored
  answer's background replay (:func:`service.replay.background.schedule`) verifies the
  fixes) or ``skipped`` (why not). Candidates left unreplayed at the deadline keep the
  engine's ranking behind those replay decided (``not_replayed`` counts them).

Nothing of the user's is run: the harness substitutes model paths and drops code-loading
flags (:func:`service.replay.plan.substitute_argv`) inside the OS sandbox.
"""

from __future__ import annotations

import time
from typing import Any

from kb.errors import TriageError
from kb.settings import KBSettings
from service.engine import FixOut, TriageResult
from service.replay.background import release_root, summarise, unavailable_reason
from service.replay.harness import replay_many

__all__ = ["needs_search", "rerank", "search_fixes"]

#: per command line inside the replay subprocess (a warm pool answers in about a second)
JOB_TIMEOUT_S = 30.0
#: phases of a candidate the pool did not run: past the deadline, or the pool was full
_NOT_RUN = frozenset({"deadline", "busy"})


def needs_search(result: TriageResult) -> bool:
    """Whether static evaluation left something for replay to decide: the check itself, a
    candidate fix, or every fix (none is statically clean, or none was found for a check
    that was located)."""
    if result.status != "located" or not result.parsed.command:
        return False
    if result.evaluation is not None and result.evaluation.fired != "true":
        return True
    if not result.fixes:
        return False
    if any(f.fixes_check == "unknown" for f in result.fixes):
        return True
    return not any(f.recommended for f in result.fixes)


def _candidates(result: TriageResult, limit: int) -> list[FixOut]:
    """The fixes worth replaying, best first: all but those static evaluation refuted."""
    return [f for f in result.fixes if f.fixes_check != "false"][:limit]


def rerank(result: TriageResult, replayed: list[FixOut], on: str) -> str:
    """Order ``result.fixes`` by replay's verdicts and move the recommendation to the first
    fix replay accepted; returns the ``fix_search`` status (see the module docstring)."""
    def status(f: FixOut) -> str:
        return (f.replay or {}).get("status", "")

    accepted = [f for f in replayed if status(f) == "verified"]
    rejected = [f for f in replayed if status(f) == "next_failure"]
    decided = len(accepted) + len(rejected)
    order = {id(f): i for i, f in enumerate(result.fixes)}

    def key(f: FixOut) -> tuple[int, int]:
        s = status(f)
        return (0 if s == "verified" else 2 if s == "next_failure" else 1, order[id(f)])

    result.fixes.sort(key=key)
    for i, f in enumerate(result.fixes, start=1):
        f.rank = i
    for f in rejected:
        f.recommended = False
        where = (f.replay or {}).get("location") or "another check"
        f.verdict = _with_replay_note(f.verdict, f"rejected by replay on {on} (then {where})")
    if accepted:
        for f in result.fixes:
            f.recommended = f is accepted[0]
        for f in accepted:
            f.verdict = _with_replay_note(f.verdict, f"accepted by replay on {on}")
        return "verified"
    if decided and decided == len(replayed):
        result.no_flag_fix = result.no_flag_fix or (
            f"replay on {on} rejected every candidate fix; no flag change found that "
            f"SGLang accepts")
        return "rejected"
    return "unverified"


def _with_replay_note(verdict: str, note: str) -> str:
    return verdict if note in verdict else f"{verdict}; {note}"


def search_fixes(result: TriageResult, settings: KBSettings, *, deadline_s: float,
                 max_candidates: int = 5, force: bool = False,
                 use_cache: bool = True) -> TriageResult:
    """Verify the candidate fixes of ``result`` by replay within ``deadline_s`` (in place).

    Runs only when :func:`needs_search` (or ``force``) holds and replay can run here
    (:func:`~service.replay.background.unavailable_reason`); otherwise ``fix_search``
    says why not and the answer is unchanged. ``use_cache=False`` (benchmarks) replays
    even what the replay cache knows.
    """
    if not (force or needs_search(result)):
        return result
    release = (result.release or {}).get("release")
    argv = list(result.parsed.command or [])
    candidates = _candidates(result, max_candidates)
    why = unavailable_reason(settings, release, argv)
    if why is None and not candidates:
        why = "no candidate fix to replay"
    if why is not None:
        result.fix_search = {"status": "skipped", "detail": why, "candidates": 0}
        return result
    assert release is not None  # unavailable_reason checked it
    hardware, arch = result.parsed.hardware, result.parsed.model_arch
    on = f"{release} with {hardware or 'no declared hardware'}"
    t0 = time.perf_counter()
    try:
        results = replay_many(release_root(settings, release), release,
                              [argv] + [f.argv for f in candidates], hardware=hardware,
                              model_arch=arch, timeout_s=max(60.0, deadline_s),
                              job_timeout_s=JOB_TIMEOUT_S, settings=settings,
                              use_cache=use_cache, deadline_s=deadline_s)
    except TriageError as exc:
        result.fix_search = {"status": "unverified", "candidates": len(candidates),
                             "detail": f"replay failed: {exc.message}"}
        return result
    seconds = round(time.perf_counter() - t0, 2)
    late = [r for r in results[1:] if r.status == "harness_error" and r.phase in _NOT_RUN]
    if len(late) == len(candidates):
        busy = all(r.phase == "busy" for r in late)
        result.fix_search = {
            "status": "unverified" if busy else "background", "candidates": len(candidates),
            "seconds": seconds,
            "detail": (f"the replay pool is full: the {len(candidates)} candidate fixes stay "
                       "unverified" if busy else
                       f"replay of {len(candidates)} candidate fixes on {on} did not finish "
                       f"within {deadline_s:g} s; it goes on in the background")}
        return result
    as_dict: dict[str, Any] = {"location": result.location.model_dump() if result.location
                               else None,
                               "fixes": [{} for _ in candidates]}
    summarise(results, as_dict, release, hardware)
    for fix, verdict in zip(candidates, as_dict["fixes"], strict=True):
        fix.replay = verdict.get("replay")
    status = rerank(result, candidates, on)
    result.replay = as_dict.get("replay")
    verified = sum(1 for f in candidates if (f.replay or {}).get("status") == "verified")
    detail = {
        "verified": f"verified by replay on {on}: {verified} of {len(candidates)} candidate "
                    f"fixes accepted",
        "rejected": f"replay on {on} rejected all {len(candidates)} candidate fixes",
        "unverified": f"replay on {on} could not decide the candidates "
                      f"({(result.replay or {}).get('detail', '')})",
    }[status]
    result.fix_search = {"status": status, "candidates": len(candidates), "detail": detail,
                         "seconds": seconds, "release": release, "hardware": hardware,
                         "not_replayed": len(late)}
    return result
