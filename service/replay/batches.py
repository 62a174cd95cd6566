"""How a batch of prepared command lines runs: on the warm pool or in one cold child.

:func:`run_warm` hands the command lines to the warm worker of their release and machine
(:mod:`service.replay.pool`); :func:`run_cold` starts one sandboxed ``child/runner.py``
for the batch (:mod:`service.replay.sandbox`, :mod:`service.replay.launch`), which imports
the release once and validates each command line in a fork. :func:`dump_options` reads
the release's option table with a cold child. Both turn the child's raw answers into
:class:`~service.replay.results.ReplayResult` objects; caching, deadlines and the choice
between them are :func:`service.replay.harness.replay_many`'s.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.engine import HardwareProfile
from service.replay import sandbox
from service.replay.errors import ReplayError
from service.replay.launch import (
    CHILD,
    HARNESS_DIR,
    STUB_DIRS,
    child_env,
    extra_env,
    log_tail,
    run_with_results,
)
from service.replay.plan import generated_paths, hardware_payload, probe_values, stub_plan
from service.replay.results import ReplayResult, to_result

__all__ = ["dump_options", "run_cold", "run_warm", "unreplayed"]


def dump_options(
    tree: Path, hw: HardwareProfile | None, home: Path, timeout_s: float
) -> dict[str, Any] | None:
    """The release's option table, read by a sandboxed child from its real parser."""
    out: list[dict[str, Any]] = []
    try:
        run_cold(
            tree,
            hw,
            [],
            None,
            max(timeout_s, 120.0),
            30,
            None,
            [],
            home,
            dump_options=True,
            options_out=out,
        )
    except ReplayError:
        return None
    return out[0] if out else None


def unreplayed(why: str = "the deadline passed") -> dict[str, Any]:
    """The raw answer for a command line not replayed in time (``deadline``: unverified,
    never cached)."""
    return {
        "status": "harness_error",
        "phase": "deadline",
        "harness_reason": f"{why} before this command line was replayed (unverified)",
    }


def run_warm(
    tree: Path,
    hw: HardwareProfile | None,
    argvs: list[list[str]],
    env: Mapping[str, str] | None,
    timeout_s: float,
    job_timeout_s: float,
    bases: list[dict[str, Any]],
    home: Path,
    deadline_at: float | None,
) -> list[ReplayResult | None]:
    """The command lines on the warm pool; None where it could not run them (go cold).
    ``timeout_s`` bounds the wait for a worker's start, as it bounds the cold import."""
    from service.replay.pool import PoolJob, default_pool

    jobs = [PoolJob(argv, job_timeout_s, extra_env(env)) for argv in argvs]
    pool = default_pool()
    # a long batch (the eval's generator, confirmations) goes in chunks of half the pool's
    # bound, so that one caller alone never overflows it; the bound refuses crowds, not batches
    step = max(1, pool.max_waiting // 2)
    raws: list[dict[str, Any] | None] = []
    try:
        for i in range(0, len(jobs), step):
            raws += pool.run(
                tree, hw, home, jobs[i : i + step], deadline=deadline_at, start_wait_s=timeout_s
            )
    except ReplayError:  # closed (interpreter exiting): the cold path decides
        return [None] * len(argvs)
    out: list[ReplayResult | None] = []
    for raw, base in zip(raws, bases, strict=True):
        if raw is None:
            out.append(None)
            continue
        result = to_result(raw, base, tree)
        result.log_tail = str(raw.get("log_tail") or "")
        out.append(result)
    return out


def run_cold(
    tree: Path,
    hw: HardwareProfile | None,
    argvs: list[list[str]],
    env: Mapping[str, str] | None,
    timeout_s: float,
    job_timeout_s: float,
    stub_failure: str | None,
    bases: list[dict[str, Any]],
    home: Path,
    test_payload: Path | None = None,
    deadline_at: float | None = None,
    dump_options: bool = False,
    options_out: list[dict[str, Any]] | None = None,
) -> list[ReplayResult]:
    """Replay ``argvs`` in one cold sandboxed child (``child/runner.py``): it imports torch and
    SGLang once and forks per command line. ``timeout_s`` bounds the import and the first
    command line, each further one adds ``job_timeout_s``, and ``deadline_at`` (a
    :func:`time.monotonic` instant) caps the whole: what it cuts off is :func:`unreplayed`.
    ``dump_options`` makes the child send the release's option table first (into
    ``options_out``)."""
    sandboxed = sandbox.status()
    if not sandboxed.available:
        raise ReplayError(sandboxed.reason)
    force, fallback = stub_plan(hw)
    overall = timeout_s + job_timeout_s * max(0, len(argvs) - 1)
    capped = deadline_at is not None and deadline_at - time.monotonic() < overall
    if deadline_at is not None:
        overall = max(1.0, min(overall, deadline_at - time.monotonic()))
    with tempfile.TemporaryDirectory(prefix="sglang-replay-") as tmp_name:
        tmp = Path(tmp_name)
        jobs = [
            {
                "argv": argv,
                "log_path": str(tmp / f"log-{i}.txt"),
                "allowed_paths": generated_paths(argv, home),
            }
            for i, argv in enumerate(argvs)
        ]
        cfg = {
            "release_root": str(tree), "stub_dirs": [str(d) for d in STUB_DIRS],
            "force_stubs": force, "fallback_stubs": fallback,
            "hardware": hardware_payload(hw), "probes": probe_values(hw),
            "forced_failure": stub_failure, "jobs": jobs,
            "job_timeout_s": min(job_timeout_s, overall), "dump_options": dump_options,
        }  # fmt: skip
        if test_payload is not None:
            (tmp / "payload.py").write_bytes(Path(test_payload).read_bytes())
            cfg["test_payload"] = str(tmp / "payload.py")
        sandbox.prepare_workdir(tmp)
        main_log = tmp / "child.log"
        t0 = time.perf_counter()
        cmd = sandbox.command(
            [sys.executable, "-s", str(CHILD), str(tmp / "config.json")],
            workdir=tmp,
            hidden=[home],
            readable=[HARNESS_DIR, tree, home / "replay-models"],
            limits=sandbox.Limits(cpu_s=int(overall) + 30),
        )
        lines, killed, returncode = run_with_results(
            cmd, cfg, tmp, child_env(tmp, tree, hw, env), main_log, overall
        )
        wall = time.perf_counter() - t0
        answers = {
            line["index"]: line["result"]
            for line in lines
            if isinstance(line.get("index"), int) and isinstance(line.get("result"), dict)
        }
        if options_out is not None:
            options_out.extend(
                line["options"] for line in lines[:1] if isinstance(line.get("options"), dict)
            )
        out: list[ReplayResult] = []
        for i, (job, base) in enumerate(zip(jobs, bases, strict=True)):
            raw = (
                unreplayed()
                if killed and capped and i not in answers
                else _read_job(answers.get(i), killed, returncode, overall)
            )
            result = to_result(raw, base, tree)
            result.timings["subprocess_wall_s"] = round(wall, 3)
            result.log_tail = log_tail(Path(job["log_path"])) or log_tail(main_log)
            out.append(result)
        return out


def _read_job(
    raw: dict[str, Any] | None, killed: bool, returncode: int | None, overall: float
) -> dict[str, Any]:
    if raw is not None:
        return raw
    if killed:
        return {
            "status": "harness_error",
            "phase": "timeout",
            "harness_reason": f"the replay did not finish within {overall:.0f}s (killed)",
        }
    return {
        "status": "harness_error",
        "phase": "crash",
        "harness_reason": f"the replay subprocess exited ({returncode}) without a result",
    }
