"""Verify by replay, in the background: reproduce the crash and check every fix.

After the deterministic answer is returned, :func:`schedule` replays the
user's command line and each candidate fix with the release's own validation
(:mod:`service.replay`) on the declared hardware profile, in one
background batch with a time budget. When it finishes, the stored triage is
updated: ``replay`` on the result says whether the same check fired, and each
fix gets ``replay``: "verified by replay on 0.5.11 with rtx-pro-6000-x8", or
the next failure. A ``harness_error`` is recorded as *unverified*, never as
SGLang's verdict. Results are cached on disk by the replay harness.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from kb.settings import KBSettings as Settings
from kb.sources import find_wheel
from service.replay import sandbox
from service.replay.results import ReplayResult

log = logging.getLogger("sglang_triage.verify")


def unavailable_reason(settings: Settings, release: str | None, argv: list[str]) -> str | None:
    """Why replay cannot run for this triage (None when it can): it needs the OS sandbox,
    a command, and the release's wheel in the cache (dev builds and --path trees have none)."""
    sandboxed = sandbox.status()
    if not sandboxed.available:
        return sandboxed.reason
    if not release or not argv:
        return "replay needs the release and the launch command"
    if find_wheel(settings.wheel_dir, release) is None:
        return f"replay needs the PyPI wheel of {release} in the cache"
    return None


def _same_check(res: ReplayResult, result: dict[str, Any]) -> bool:
    """Did the replay fail inside the check the static diagnosis located?"""
    loc = result.get("location") or {}
    origin = res.origin
    return bool(
        origin is not None
        and origin.path == loc.get("path")
        and origin.line is not None
        and loc.get("start_line", 0) <= origin.line <= loc.get("end_line", -1)
    )


def summarise(
    results: list[ReplayResult], result: dict[str, Any], release: str, hardware: str | None
) -> dict[str, Any]:
    """Fold replay results into the stored triage (first = the user's command, then fixes).

    Without a hardware profile, replay runs the release on this CPU-only machine,
    and validation that asks for the GPU stops before the check. When the user's
    command then fails elsewhere, that says nothing about the crash: the command
    and every fix failing at the same place are *unverified*, with what would
    settle it (the hardware), never "different failure" or "next failure".
    """
    on = f"{release} with {hardware or 'no declared hardware'}"
    first, rest = results[0], results[1:]
    blocked_at: str | None = None  # where a replay without hardware stopped short
    if first.status == "harness_error":
        repro = {"status": "unverified", "detail": f"replay harness error: {first.harness_reason}"}
    elif first.status == "raised":
        same = _same_check(first, result)
        if not same and hardware is None:
            blocked_at = first.location
            repro = {
                "status": "unverified",
                "location": blocked_at,
                "detail": f"replay on {release} without a hardware profile stopped at "
                f"{blocked_at or 'an earlier check'} ({first.exception_type}) "
                "before the crash's check; give the hardware (GET /hardware "
                "lists the profiles) to verify",
            }
        else:
            repro = {
                "status": "reproduced" if same else "different_failure",
                "detail": f"replay on {on}: {first.exception_type} "
                f"{'at the same check' if same else 'elsewhere'}",
                "location": _loc(first),
            }
    else:
        repro = {"status": first.status, "detail": f"replay on {on}: {first.status}"}
    for fix, res in zip(result.get("fixes", []), rest, strict=False):
        if res.status == "passed":
            fix["replay"] = {"status": "verified", "detail": f"verified by replay on {on}"}
        elif res.status == "harness_error":
            fix["replay"] = {
                "status": "unverified",
                "detail": f"replay harness error: {res.harness_reason}",
            }
        elif blocked_at is not None and res.location == blocked_at:
            fix["replay"] = {
                "status": "unverified",
                "detail": "replay without a hardware profile "
                "stopped at the same place as the command; give the hardware to verify",
            }
        else:
            fix["replay"] = {
                "status": "next_failure",
                "detail": f"replay on {on}: then {res.exception_type}",
                "location": _loc(res),
            }
    result["replay"] = repro
    return result


def _loc(res: ReplayResult) -> str | None:
    return res.location


def release_root(settings: Settings, release: str) -> Path:
    """The unpacked release whose validation replay runs (its wheel fetched into the cache)."""
    from kb.sources import fetch_release

    return fetch_release(
        release,
        wheel_dir=settings.wheel_dir,
        source_dir=settings.source_dir,
        index_url=settings.pip_index_url,
    ).root


def schedule(
    settings: Settings,
    result: dict[str, Any],
    argv: list[str],
    hardware: str | None,
    model_arch: str | None,
    on_done: Callable[[dict[str, Any]], None],
    budget_s: float = 180.0,
    client: str = "local",
) -> Future | None:
    """Start the background replay of ``argv`` and the fixes; ``on_done`` gets the updated result.

    None when replay cannot run (see :func:`unavailable_reason`); raises
    :class:`~service.replay.queue.QueueFull` when the queue refuses the batch."""
    from service.replay.harness import replay_async

    release = (result.get("release") or {}).get("release")
    if unavailable_reason(settings, release, argv) is not None:
        return None
    argvs = [argv] + [f["argv"] for f in result.get("fixes", [])]
    fut = replay_async(
        release_root(settings, release),
        release,
        argvs,
        hardware=hardware,
        model_arch=model_arch,
        timeout_s=budget_s,
        settings=settings,
        client=client,
    )

    def done(f: Future) -> None:
        try:
            on_done(summarise(f.result(), result, release, hardware))
        except Exception as exc:
            log.warning("replay failed: %s", exc)
            result["replay"] = {"status": "unverified", "detail": f"replay failed: {exc}"}
            on_done(result)

    fut.add_done_callback(done)
    return fut
