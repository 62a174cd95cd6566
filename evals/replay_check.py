"""The eval's replay judge: does the recommended fix pass the release's own validation?

With ``replay`` on, each in-process answer goes through what the service does before
answering (the replay-backed fix search, :func:`service.replay.search.search_fixes`,
here without a deadline so that the verdict does not depend on the machine's load), and
then its **recommended** fix is replayed on the incident's hardware and model
architecture (answered from the replay cache when the search already ran it).
:func:`judge` returns what :mod:`evals.scoring` scores:

``fix_replay``      ``passed`` (SGLang accepted the recommended fix), ``failed`` (it
                    refused it, or no fix was recommended although one is expected),
                    or None when replay cannot say (no wheel, no sandbox, a harness
                    error, or a replay without hardware that stops before the crash's
                    check for the user's command too)
``recommended``     whether an answer recommends a fix at all

Without a declared machine, replay of the user's command runs too, so a failure of the fix
that the command shares (validation needing a GPU on this CPU-only machine) is not counted
against the fix.
"""

from __future__ import annotations

from typing import Any

from kb.settings import KBSettings
from service.engine import TriageResult
from service.replay.background import release_root, summarise, unavailable_reason
from service.replay.harness import prewarm as _prewarm
from service.replay.harness import replay_many
from service.replay.search import search_fixes

__all__ = ["judge", "prewarm", "searched"]

#: the search waits this long in the eval (answers must not depend on the machine's load)
EVAL_DEADLINE_S = 600.0


def searched(result: TriageResult, settings: KBSettings, max_candidates: int = 5
             ) -> TriageResult:
    """``result`` after the fix search the service runs before answering (no deadline)."""
    return search_fixes(result, settings, deadline_s=EVAL_DEADLINE_S,
                        max_candidates=max_candidates)


def prewarm(settings: KBSettings, release: str | None, hardware: str | None) -> bool:
    """Start the warm replay worker for ``release`` on ``hardware`` in the background (the
    eval calls it for the next group of incidents while it answers the current one); False
    when replay could not run for that release (no sandbox, no wheel in the cache)."""
    if release is None or unavailable_reason(settings, release, ["--model-path", "m"]):
        return False
    return _prewarm(release_root(settings, release), release, hardware, settings)


def judge(result: dict[str, Any], settings: KBSettings) -> dict[str, Any]:
    """Replay's verdict on the recommended fix of ``result`` (an answer as JSON)."""
    fixes = result.get("fixes") or []
    top = next((f for f in fixes if f.get("recommended")), None)
    out: dict[str, Any] = {"recommended": top is not None, "fix_replay": None, "detail": ""}
    release = (result.get("release") or {}).get("release")
    parsed = result.get("parsed") or {}
    argv = list(parsed.get("command") or [])
    why = unavailable_reason(settings, release, argv)
    if why is not None:
        out["detail"] = why
        return out
    if top is None:
        out["fix_replay"] = "failed"
        out["detail"] = "no fix recommended"
        return out
    done = (top.get("replay") or {}).get("status")
    if done == "verified":
        out["fix_replay"] = "passed"
        out["detail"] = (top.get("replay") or {}).get("detail", "")
        return out
    hardware = parsed.get("hardware")
    # without hardware, the user's command is replayed too: a stop it shares with the fix
    # (validation asking this CPU-only machine for its GPU) says nothing about the fix
    argvs = [top["argv"]] if hardware else [argv, top["argv"]]
    results = replay_many(release_root(settings, release), release, argvs, hardware=hardware,
                          model_arch=parsed.get("model_arch"), settings=settings)
    if hardware:
        fix = results[0]
        out["detail"] = fix.summary()
        out["fix_replay"] = {"passed": "passed", "raised": "failed",
                             "argparse_error": "failed"}.get(fix.status)
        return out
    probe = {"location": result.get("location"), "fixes": [{}]}
    summarise(results, probe, release, hardware)
    verdict = probe["fixes"][0].get("replay") or {}
    out["detail"] = verdict.get("detail", "")
    out["fix_replay"] = {"verified": "passed", "next_failure": "failed"}.get(
        verdict.get("status") or "")
    return out
