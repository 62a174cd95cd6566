"""The warm replay worker, executed as a script inside the sandbox (stdlib only).

``python child/serve.py <config.json>`` is started by :mod:`service.replay.pool`, one
process per release tree, GPU model and cache home. It does the cold runner's setup
(:func:`runner.setup`: stubs, hardware, importing ``sglang.srt.server_args``) once, then
answers one JSON job per line on stdin with one JSON answer per line on a protocol stream
(see :func:`serve`), each job validated in its own fork (:func:`runner.run_forked`). A
job declaring another count or memory of the same GPU gets it applied in its fork
(:func:`_apply_hardware`, handed to the fork as ``roots["apply_hardware"]``).

``import runner`` works because this script's folder is ``sys.path[0]`` when it starts
(:func:`runner.setup` removes it later). Like ``runner.py`` it never imports
``sglang_triage``: the worker's interpreter sees only the release, the stubs and the
venv's third-party packages.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import runner
import verdicts


def _apply_hardware(job: dict[str, Any], roots: dict[str, Any]) -> dict[str, Any] | None:
    """In a warm worker's fork: declare the job's machine when it is not the one the worker
    was set up with (the same GPU model: the worker is per model). torch's device answers and the
    faked ``nvidia-smi`` report the job's profile, SGLang's own probes get their originals
    back (setup replaced them by constants) and their caches emptied, then are pinned to the
    job's values as at setup. Returns the probe disagreements for this machine (None when
    nothing was changed)."""
    wanted = job.get("hardware")
    if not wanted or wanted == roots.get("setup_hardware"):
        return None
    import _replay_hw as hw
    import _replay_stubkit as kit

    kit.HARDWARE.clear()
    kit.HARDWARE.update(wanted)
    hw.patch_torch(wanted)
    hw.patch_subprocess(wanted)
    originals = roots.get("original_probes") or {}
    for name, mod in list(sys.modules.items()):
        if name.startswith("sglang") and mod is not None:
            for attr, obj in list(vars(mod).items()):
                # type checks only: a lazy-import proxy's __getattr__ would import its module
                if (
                    attr in originals
                    and isinstance(obj, types.FunctionType)
                    and obj.__dict__.get("__replay_stub__") is True
                ):
                    setattr(mod, attr, originals[attr])
    _clear_sglang_caches()
    return hw.patch_probes(job.get("probes") or {}, wanted.get("memory_mib"))


def _clear_sglang_caches() -> None:
    """Forget what SGLang's ``functools`` caches learnt from the setup's machine (device
    capability checks and the like are cached on first call)."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("sglang") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, functools._lru_cache_wrapper):  # never getattr on a lazy proxy
                with contextlib.suppress(Exception):
                    obj.cache_clear()


#: a job's machine fact -> the facts read through our fakes that reveal it (``_replay_hw``,
#: ``pynvml``); any other difference (GPU model, capability) is revealed by all of _ANY
_REVEALED_BY = {
    "count": {"count", "nvidia-smi"},
    "memory_mib": {"memory", "properties", "nvidia-smi"},
}
_ANY = {"capability", "name", "properties", "nvidia-smi", "count", "memory"}


def bound_at_import(
    wanted: dict[str, Any],
    setup: dict[str, Any],
    probes: dict[str, Any],
    setup_probes: dict[str, Any],
    read: set[str],
) -> list[str]:
    """Why a job's machine cannot be applied in a fork of this worker: the facts in which it
    differs from the setup's machine that the release read while importing (``read``: every
    fact any imported module's top level asked for). Empty: the fork can re-pin them."""
    why = []
    for key in sorted(set(wanted) | set(setup)):
        if key == "name" or wanted.get(key) == setup.get(key):
            continue
        hit = _REVEALED_BY.get(key, _ANY) & read
        if hit:
            why.append(f"{key} (read at import through {', '.join(sorted(hit))})")
    why += [
        f"{name} (called at import)"
        for name in sorted(set(probes) | set(setup_probes))
        if probes.get(name) != setup_probes.get(name) and name in read
    ]
    return why


def _serve_job(
    sa: Any,
    job: dict[str, Any],
    roots: dict[str, Any],
    report: dict[str, Any],
    default_timeout: float,
) -> dict[str, Any]:
    """One job of the warm worker: validate in a fork (or answer the setup failure, or
    ``machine_bound`` when the job's machine differs in a fact the release read at import)."""
    if sa is None:
        return {**report, "setup": {k: report.get(k) for k in ("timings", "shims")}}
    if job.get("hardware") and job["hardware"] != roots.get("setup_hardware"):
        import _replay_stubkit as kit

        read = set().union(*kit.IMPORT_CONSULTED.values())
        why = bound_at_import(
            job["hardware"],
            roots.get("setup_hardware") or {},
            job.get("probes") or {},
            roots.get("setup_probes") or {},
            read,
        )
        if why:
            return {
                "status": "harness_error",
                "phase": "machine_bound",
                "harness_reason": "this worker's release read these facts of its machine "
                "while importing: " + "; ".join(why),
            }
    learn = roots.get("learn_left", 0) > 0
    if learn:
        job = {**job, "report_modules": True}
    result = runner.run_forked(sa, job, roots, float(job.get("timeout_s") or default_timeout))
    lazily = result.pop("new_modules", None)
    result.pop("import_consulted", None)
    if learn and lazily:
        roots["learn_left"] -= 1
        roots["to_import"] = lazily  # imported here once the answer is out (_preimport)
    result["setup"] = {k: report.get(k) for k in ("timings", "shims", "probe_disagreements")}
    if result.pop("repatched", False):  # this job's machine, not the setup's
        result["setup"]["probe_disagreements"] = result.pop("probe_disagreements", None) or {}
    return result


#: how many jobs the worker learns from: what their forks imported lazily is imported into
#: the worker itself after answering, so that later forks start with it (_preimport)
LEARN_JOBS = 3


def _preimport(names: list[str]) -> list[str]:
    """Import here what a job's fork imported lazily (0.5.19+'s resolution pipeline imports
    most of its code when first run: ≈ 3 s a fork, ≈ 0.2 s once the worker holds it). A
    module that fails to import is left out, so a fork that needs it fails the same way as
    in a cold replay. The worker is keyed by GPU model (``WorkerKey``), so what SGLang
    computes from the machine while importing these is this worker's machine's."""
    done = []
    for name in names:
        if name in sys.modules or name.startswith("__"):
            continue
        with contextlib.suppress(BaseException):
            __import__(name)
            done.append(name)
    return done


def serve(cfg: dict[str, Any], log_path: str) -> None:
    """The warm worker's loop (``python child/serve.py <config.json>``).

    The protocol stays on private descriptors: the original stdin and stdout are
    duplicated, then fd 0 becomes ``/dev/null`` and fds 1 and 2 the worker's log
    file, so nothing SGLang or a stub prints can corrupt an answer (forks close the
    duplicates first thing). After setup one line ``{"ready": true, "ok": bool,
    "setup": ...}`` is written; then for each job line ``{"id", "argv", "workdir",
    "log_path", "allowed_paths", "timeout_s", "env"?}`` the job is validated in a fork
    (in its own ``workdir``, ``env`` applied in the fork only; the result comes back
    through a pipe, never a file) and answered ``{"id", "result"}`` (or ``{"id",
    "error"}`` for a line that is not a job). A result with ``leftover_processes``
    (the job left processes behind; they were killed) tells the pool to retire this
    worker. EOF on stdin ends the worker.
    """
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    roots: dict[str, Any] = {
        "release": os.path.abspath(cfg["release_root"]),
        "stubs": [os.path.abspath(d) for d in cfg["stub_dirs"]],
        "close_in_fork": (proto_in.fileno(), proto_out.fileno()),
        "setup_hardware": cfg.get("hardware") or None,
        "setup_probes": cfg.get("probes") or {},
        "apply_hardware": _apply_hardware,  # called by runner.run_forked in each fork
    }

    def answer(message: dict[str, Any]) -> None:
        proto_out.write(json.dumps(message, default=repr) + "\n")
        proto_out.flush()

    try:
        sa, report = runner.setup(cfg, roots)
    except BaseException as exc:
        sa, report = None, verdicts.runner_failure(exc)
    roots["learn_left"] = LEARN_JOBS
    answer(
        {
            "ready": True,
            "ok": sa is not None,
            "pid": os.getpid(),
            "setup": {
                k: report.get(k)
                for k in (
                    "timings",
                    "shims",
                    "probe_disagreements",
                    "harness_reason",
                    "import_consulted",
                )
            },
        }
    )
    default_timeout = float(cfg.get("job_timeout_s") or 30)
    for line in proto_in:
        job_id = None
        try:
            job = json.loads(line)
            job_id = job["id"]
            result = _serve_job(sa, job, roots, report, default_timeout)
        except BaseException as exc:
            if job_id is None:
                answer({"id": None, "error": f"not a job: {type(exc).__name__}: {exc}"[:500]})
                continue
            result = verdicts.runner_failure(exc)
        answer({"id": job_id, "result": result})
        if roots.get("to_import"):
            t0 = time.perf_counter()
            report["preimported"] = report.get("preimported", 0) + len(
                _preimport(roots.pop("to_import"))
            )
            timings = report.setdefault("timings", {})
            timings["preimport_s"] = timings.get("preimport_s", 0.0) + time.perf_counter() - t0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _cfg = json.loads(Path(sys.argv[1]).read_text())
    serve(_cfg, _cfg["log_path"])
