"""Replay the user's command on the release an upgrade answer names: SGLang is the judge.

The engine proposes "upgrade to ≥ X" from the KB (:mod:`service.engine.fixes.upgrade`):
the check is gone from X, or X's version of it passes the user's values. Whether X's
whole validation accepts the command is for X's own code to say. :func:`verify_upgrade`
replays the command, unchanged, through X's validation in the sandbox (the same
harness as every replay: model paths substituted, code-loading flags dropped) and
writes ``upgrade_fix.replay``:

* ``verified``: X's validation accepted the command; the upgrade is sure (the summary,
  the explanation and ``no_flag_fix`` now lead with it), and "the other checks of X's
  start-up" leaves ``not_checked``;
* ``next_failure``: on the declared hardware, X refused the command at another check
  (cited as replay reports it); the upgrade is no longer sure and the note says so;
* ``unverified``: replay could not decide: no sandbox or wheel, a harness error, the
  deadline, or no declared hardware and X stopped at a check that reads the GPU.
"""

from __future__ import annotations

from kb.errors import TriageError
from kb.settings import KBSettings
from service.engine import (
    TriageResult,
    upgrade_no_fix,
    upgrade_paragraph,
    upgrade_phrase,
    with_upgrade,
)
from service.replay.background import release_root, unavailable_reason
from service.replay.fix_search import JOB_TIMEOUT_S
from service.replay.harness import replay_many

__all__ = ["verify_upgrade"]


def verify_upgrade(
    result: TriageResult, settings: KBSettings, *, deadline_s: float, use_cache: bool = True
) -> TriageResult:
    """Replay ``result``'s command on its upgrade's release and record the verdict (in
    place; see the module docstring). Nothing happens without an ``upgrade_fix``."""
    up = result.upgrade_fix
    if up is None:
        return result
    argv = list(result.parsed.command or [])
    why = unavailable_reason(settings, up.release, argv)
    if why is not None:
        up.replay = {"status": "unverified", "detail": f"not replayed: {why}"}
        return result
    hardware, arch = result.parsed.hardware, result.parsed.model_arch
    on = f"{up.release} with {hardware or 'no declared hardware'}"
    try:
        res = replay_many(
            release_root(settings, up.release),
            up.release,
            [argv],
            hardware=hardware,
            model_arch=arch,
            timeout_s=max(60.0, deadline_s),
            job_timeout_s=JOB_TIMEOUT_S,
            settings=settings,
            use_cache=use_cache,
            deadline_s=deadline_s,
        )[0]
    except TriageError as exc:
        up.replay = {"status": "unverified", "detail": f"replay failed: {exc.message}"}
        return result
    if res.status == "passed":
        up.replay = {
            "status": "verified",
            "detail": f"your command passes {up.release}'s validation on replay ({on})",
        }
        up.not_checked = [n for n in up.not_checked if not n.startswith("the other checks")]
        if not up.sure and not up.flags_missing:  # now the answer leads with it
            up.sure = True
            result.summary = with_upgrade(result.summary, upgrade_phrase(up))
            result.explanation = upgrade_paragraph(up) + result.explanation
            if result.no_flag_fix:
                result.no_flag_fix = upgrade_no_fix(up, result.no_flag_fix)
    elif res.status == "harness_error" and res.phase in ("deadline", "busy"):
        why = (
            "the replay pool was full"
            if res.phase == "busy"
            else "its worker was starting, or the fix search used the time"
        )
        up.replay = {
            "status": "unverified",
            "detail": f"the replay on {on} did not run within the fix search's deadline ({why})",
        }
    elif res.status == "harness_error":
        up.replay = {
            "status": "unverified",
            "detail": f"replay harness error: {res.harness_reason}",
        }
    elif hardware is None:
        up.replay = {
            "status": "unverified",
            "location": res.location,
            "detail": f"replay on {on} stopped at {res.location or 'a check'} "
            f"({res.exception_type or 'argparse error'}); give the hardware "
            "to verify",
        }
    else:
        what = res.exception_type or "argparse error"
        up.replay = {
            "status": "next_failure",
            "location": res.location,
            "detail": f"replay on {on}: then {what} at {res.location or 'a check'}",
        }
        if up.sure:  # the answer led with it: it no longer does
            result.summary = result.summary.replace(f"; {upgrade_phrase(up)}", "")
            if result.no_flag_fix:
                result.no_flag_fix += f" (replay on {on} refuses the upgraded command: {what})"
        up.sure = False
        up.note += f"; but replay on {on} stops at {res.location or 'another check'} ({what})"
    return result
