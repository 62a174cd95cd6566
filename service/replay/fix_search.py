"""Replay-backed fix search: let the release's own validation decide what static evaluation
could not, within a deadline, before the answer is returned.

The engine ranks fixes by static evaluation. On the resolution pipeline (0.5.19+) and
wherever a check reads GPU or model facts, it often cannot decide the check or a
candidate (``fixes_check == "unknown"``), or its best statically clean fix is not the
one SGLang accepts (a check deeper in validation refuses it). :func:`needs_search` says
when static evaluation left something open; :func:`search_fixes` then replays the
candidate fixes (best first, at most ``max_candidates``; without a declared machine the
user's command too). When static evaluation is sure, only its recommended fix is replayed
(``verify_clean``), and the other candidates only if SGLang refuses it. Replay runs
on the warm replay pool (:mod:`service.replay.pool`: each command line
costs well under a second once the release's worker runs; over the pool's bound a
candidate is *unverified*) and waits at most ``deadline_s``:

* each replayed fix gets ``replay`` (``verified``, ``next_failure`` or ``unverified``, as
  :func:`service.replay.background.summarise` words it, on the declared hardware);
* fixes are re-ranked: accepted by replay first (what keeps the request first, see
  below), then those not decided by replay, then those replay rejected; the
  **recommended** fix is the first one replay accepted. When replay ran and rejected every candidate, nothing is recommended
  and the answer says so; when replay could not decide (harness error, no hardware, past
  the deadline), the engine's own recommendation stands;
* ``fix_search`` (:class:`~service.engine.FixSearch`) records what happened: ``verified``
  (with the release and hardware profile), ``rejected``, ``unverified`` (why), ``background`` (the deadline
  passed before any candidate was replayed, e.g. while the release's worker starts: the
  answer goes out as the engine gave it, the worker keeps starting, and the stored
  answer's background replay (:func:`service.replay.background.schedule`) verifies the
  fixes) or ``skipped`` (why not). Candidates left unreplayed at the deadline keep the
  engine's ranking behind those replay decided (``not_replayed`` counts them).

**What the user asked for.** Among the fixes replay accepted, the recommended one keeps the
most of the user's command (:func:`request_cost`): after the rule cards (a fix violating an
error card comes after those that do not, as in the engine), no feature flag given up, then
fewest of the user's flags removed or changed, then fewest edits, then the engine's order. When the
statically recommended fix gives part of the request up, the listed fixes that keep more
are replayed with it (:func:`keeping_alternatives`), so that SGLang can accept one of them.
A guard flip (its origin ends with ``(skips the check)``) that replay rejects is dropped.

Nothing of the user's is run: the harness substitutes model paths and drops code-loading
flags (:func:`service.replay.plan.substitute_argv`) inside the OS sandbox.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from kb.errors import TriageError
from kb.settings import KBSettings
from service.engine import FixOut, FixSearch, TriageResult, summary_with_fix
from service.replay.background import release_root, summarise, unavailable_reason
from service.replay.harness import replay_many
from service.replay.probes import probe_env, startup_request
from service.replay.results import ReplayResult

__all__ = [
    "SKIPS_THE_CHECK",
    "FoundFixes",
    "find_fixes",
    "keeping_alternatives",
    "needs_search",
    "request_cost",
    "rerank",
    "search_fixes",
    "skips_check",
]

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


def rerank(
    result: TriageResult, replayed: list[FixOut], on: str
) -> Literal["verified", "rejected", "unverified"]:
    """Order ``result.fixes`` by replay's verdicts and move the recommendation to the first
    fix replay accepted; returns the ``fix_search`` status (see the module docstring)."""

    def status(f: FixOut) -> str:
        return (f.replay or {}).get("status", "")

    accepted = [f for f in replayed if status(f) == "verified"]
    rejected = [f for f in replayed if status(f) == "next_failure"]
    decided = len(accepted) + len(rejected)
    order = {id(f): i for i, f in enumerate(result.fixes)}

    def key(f: FixOut) -> tuple[Any, ...]:
        s = status(f)
        if s == "verified":  # among what SGLang accepts, what keeps the request first
            return (0, request_cost(f), order[id(f)])
        return (2 if s == "next_failure" else 1, (), order[id(f)])

    # a guard flip (it skips the check, :func:`service.engine.fixes.filters.guard_flip`) is
    # kept only when replay accepts it
    result.fixes[:] = [
        f for f in result.fixes if not (skips_check(f) and any(f is r for r in rejected))
    ]
    rejected = [f for f in rejected if not skips_check(f)]
    result.fixes.sort(key=key)
    accepted.sort(key=key)
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
            _refute_trips(f)
        return "verified"
    if decided and decided == len(replayed):
        result.no_flag_fix = result.no_flag_fix or (
            f"replay on {on} rejected every candidate fix; no flag change found that SGLang accepts"
        )
        return "rejected"
    return "unverified"


#: the engine's mark of a guard flip in a fix's origin (``service.engine.fixes.filters.SKIP_NOTE``)
SKIPS_THE_CHECK = "(skips the check)"


def skips_check(fix: FixOut) -> bool:
    """Whether ``fix`` flips an early exit that skips the check instead of fixing it."""
    return fix.origin.endswith(SKIPS_THE_CHECK)


def request_cost(fix: FixOut) -> tuple[int, int, int, int]:
    """How much of the user's command ``fix`` gives up, lower first: (violates an error
    rule card: never recommended before a fix that does not, as the engine ranks them;
    gives up a feature flag; the user's flags it removes or changes: its ``-`` edit lines;
    flags it edits). Among fixes replay accepted, the recommended one is the least costly
    (then the engine's order): one that keeps every flag the user set, with the fewest
    edits."""
    carded = any(
        v.verdict == "violated" and v.severity == "error" and not v.background
        for v in fix.rule_verdicts
    )
    removed = sum(1 for line in fix.edits if line.startswith("- "))
    return (int(carded), 0 if fix.keeps_features else 1, removed, len(fix.set) + len(fix.remove))


def keeping_alternatives(result: TriageResult, first: FixOut, limit: int) -> list[FixOut]:
    """Candidates to replay with ``first`` (the statically recommended fix) when it gives up
    part of the request: the listed fixes static evaluation did not refute that cost less
    (:func:`request_cost`), at most ``limit``; empty when ``first`` keeps every flag."""
    cost = request_cost(first)
    if cost[1:3] == (0, 0):
        return []
    return [
        f
        for f in result.fixes
        if f is not first and f.fixes_check != "false" and request_cost(f) < cost
    ][:limit]


def _refute_trips(fix: FixOut) -> None:
    """A fix replay accepted: the checks static re-checking predicted would fire instead did
    not (the release's whole validation passed), so they leave ``trips`` and the verdict
    says so (``replay.refuted_trips`` keeps where they are)."""
    if not fix.trips:
        return
    where = [f"{t.get('function')} ({t.get('path')}:{t.get('line')})" for t in fix.trips]
    fix.replay = {**(fix.replay or {}), "refuted_trips": where}
    fix.trips = []
    fix.verdict = _with_replay_note(
        fix.verdict, "replay shows that " + ", ".join(where[:2]) + " does not fire"
    )


def _with_replay_note(verdict: str, note: str) -> str:
    return verdict if note in verdict else f"{verdict}; {note}"


@dataclass(frozen=True)
class FoundFixes:
    """What a fix search gives the answer: its status (``fix_search``), and the answer's
    fixes with their replay verdicts in their new order (dropped guard flips left out),
    the summary and ``no_flag_fix`` that go with them, and ``replay`` (the user's command
    replayed alongside, without declared hardware; else the answer's own, unchanged)."""

    fix_search: FixSearch
    fixes: list[FixOut]
    summary: str
    no_flag_fix: str | None
    replay: dict[str, Any] | None

    def applied_to(self, result: TriageResult) -> TriageResult:
        """``result`` with these parts (a new answer; ``result`` is left as it is)."""
        return result.model_copy(
            update={
                "fixes": self.fixes,
                "summary": self.summary,
                "no_flag_fix": self.no_flag_fix,
                "replay": self.replay,
                "fix_search": self.fix_search,
            }
        )


def search_fixes(
    result: TriageResult,
    settings: KBSettings,
    *,
    deadline_s: float,
    max_candidates: int = 5,
    force: bool = False,
    verify_clean: bool = True,
    use_cache: bool = True,
) -> TriageResult:
    """``result`` after :func:`find_fixes` (``result`` itself when there was nothing to
    search; never changed: the searched answer is a new one)."""
    found = find_fixes(
        result,
        settings,
        deadline_s=deadline_s,
        max_candidates=max_candidates,
        force=force,
        verify_clean=verify_clean,
        use_cache=use_cache,
    )
    return result if found is None else found.applied_to(result)


def find_fixes(
    result: TriageResult,
    settings: KBSettings,
    *,
    deadline_s: float,
    max_candidates: int = 5,
    force: bool = False,
    verify_clean: bool = True,
    use_cache: bool = True,
) -> FoundFixes | None:
    """Verify the candidate fixes of ``result`` by replay within ``deadline_s``; None when
    there is nothing to search (``result`` is never changed: the search works on a copy).

    When :func:`needs_search` (or ``force``) holds, the best ``max_candidates`` are
    replayed together. Otherwise, with ``verify_clean``, the statically recommended fix
    alone is replayed first (one command line: a fraction of a second on a warm worker),
    and only when replay refuses it are the other candidates replayed. Replay must be able
    to run here (:func:`~service.replay.background.unavailable_reason`); otherwise
    ``fix_search`` says why not and the fixes are as they were. ``use_cache=False``
    (benchmarks) replays even what the replay cache knows.
    """
    wide = force or needs_search(result)
    if not wide and not (
        verify_clean and result.status == "located" and any(f.recommended for f in result.fixes)
    ):
        return None
    work = result.model_copy(deep=True)  # re-ranked, with its fixes' verdicts written in
    status = _search_fixes(work, settings, wide, deadline_s, max_candidates, use_cache)
    return FoundFixes(status, work.fixes, work.summary, work.no_flag_fix, work.replay)


def _search_fixes(
    result: TriageResult,
    settings: KBSettings,
    wide: bool,
    deadline_s: float,
    max_candidates: int,
    use_cache: bool,
) -> FixSearch:
    """:func:`find_fixes` on ``result``, a copy of the answer it changes (see there)."""
    release = result.release.release
    argv = list(result.parsed.command or [])
    why = unavailable_reason(settings, release, argv)
    candidates = _candidates(result, max_candidates)
    if why is None and not candidates:
        why = "no candidate fix to replay"
    if why is not None:
        return FixSearch(status="skipped", detail=why, candidates=0)
    assert release is not None  # unavailable_reason checked it
    t0 = time.perf_counter()
    if not wide:  # the recommended fix first; the rest only when replay refuses it
        top = next(f for f in result.fixes if f.recommended)
        # with the fixes that keep more of the request, when it gives some up
        first = [top, *keeping_alternatives(result, top, max_candidates - 1)]
        replayed = _search(result, settings, release, argv, first, deadline_s, use_cache)
        if (top.replay or {}).get("status") != "next_failure":
            return _finish(result, first, release, t0, deadline_s, replayed)
        candidates += [f for f in first if all(f is not c for c in candidates)]
    left = max(0.0, deadline_s - (time.perf_counter() - t0))
    replayed = _search(result, settings, release, argv, candidates, left, use_cache)
    return _finish(result, candidates, release, t0, deadline_s, replayed)


@dataclass(frozen=True)
class _Replayed:
    """How one round of replay went: ``error`` (the harness failed), else how many
    candidates the deadline left unreplayed (``late``) and whether all of those found the
    pool full (``busy``)."""

    error: str | None = None
    late: int = 0
    busy: bool = False


def _search(
    result: TriageResult,
    settings: KBSettings,
    release: str,
    argv: list[str],
    candidates: list[FixOut],
    deadline_s: float,
    use_cache: bool,
) -> _Replayed:
    """Replay ``candidates`` (and, without declared hardware, the user's command, to tell a
    stop they share on this CPU-only machine from a verdict) and record each one's
    ``replay``; returns how the round went."""
    hardware, arch = result.parsed.hardware, result.parsed.model_arch
    lines = [f.argv for f in candidates] if hardware else [argv] + [f.argv for f in candidates]
    # a check past validation: replay goes on into its own code (service.replay.probes)
    startup = startup_request(result)
    probe: dict[str, Any] = (
        {"env": probe_env(startup[0]), "model_facts": startup[1]} if startup else {}
    )
    try:
        results = replay_many(
            release_root(settings, release),
            release,
            lines,
            hardware=hardware,
            model_arch=arch,
            timeout_s=max(60.0, deadline_s),
            job_timeout_s=JOB_TIMEOUT_S,
            settings=settings,
            use_cache=use_cache,
            deadline_s=deadline_s,
            **probe,
        )
    except TriageError as exc:
        return _Replayed(error=f"replay failed: {exc.message}")
    own = results if hardware else results[1:]
    late = [r for r in own if r.status == "harness_error" and r.phase in _NOT_RUN]
    replayed = _Replayed(late=len(late), busy=all(r.phase == "busy" for r in late))
    if hardware:
        on = f"{release} with {hardware}"
        for fix, res in zip(candidates, own, strict=True):
            fix.replay = _verdict(res, on)
        return replayed
    as_dict: dict[str, Any] = {
        "location": result.location.model_dump() if result.location else None,
        "fixes": [{} for _ in candidates],
    }
    summarise(results, as_dict, release, hardware)
    for fix, verdict in zip(candidates, as_dict["fixes"], strict=True):
        fix.replay = verdict.get("replay")
    result.replay = as_dict.get("replay")
    return replayed


def _verdict(res: ReplayResult, on: str) -> dict[str, Any]:
    """A fix's ``replay`` from its own replay on a declared machine (SGLang's verdict)."""
    if res.status == "passed":
        return {"status": "verified", "detail": f"verified by replay on {on}"}
    if res.status == "harness_error":
        return {"status": "unverified", "detail": f"replay harness error: {res.harness_reason}"}
    what = res.exception_type or "argparse error"
    return {
        "status": "next_failure",
        "detail": f"replay on {on}: then {what}",
        "location": res.location,
    }


def _finish(
    result: TriageResult,
    candidates: list[FixOut],
    release: str,
    t0: float,
    deadline_s: float,
    replayed: _Replayed,
) -> FixSearch:
    """Re-rank by the verdicts (in ``result``) and say how the search went (see the
    module docstring)."""
    hardware = result.parsed.hardware
    on = f"{release} with {hardware or 'no declared hardware'}"
    seconds = round(time.perf_counter() - t0, 2)
    n = len(candidates)
    if replayed.error is not None:
        return FixSearch(status="unverified", candidates=n, detail=replayed.error, seconds=seconds)
    late = replayed.late
    if late == n:
        busy = replayed.busy
        return FixSearch(
            status="unverified" if busy else "background",
            candidates=n,
            seconds=seconds,
            detail=(
                f"the replay pool is full: the {n} candidate fixes stay unverified"
                if busy
                else f"replay of {n} candidate fixes on {on} did not finish "
                f"within {deadline_s:g} s; it goes on in the background"
            ),
        )
    status = rerank(result, candidates, on)
    if status in ("verified", "rejected"):
        result.summary = summary_with_fix(
            result.summary, next((f for f in result.fixes if f.recommended), None)
        )
    verified = sum(1 for f in candidates if (f.replay or {}).get("status") == "verified")
    detail = {
        "verified": f"verified by replay on {on}: {verified} of {n} candidate fixes accepted",
        "rejected": f"replay on {on} rejected all {n} candidate fixes",
        "unverified": f"replay on {on} could not decide the candidates",
    }[status]
    return FixSearch(
        status=status,
        candidates=n,
        detail=detail,
        seconds=seconds,
        release=release,
        hardware=hardware,
        not_replayed=late,
    )
