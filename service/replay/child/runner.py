"""Replay runner, executed as a script inside the isolated subprocess (stdlib only).

``python child/runner.py <config.json>`` reads the batch written by
:mod:`service.replay.harness` (one release, one hardware profile, one
or more command lines), then

1. fixes ``sys.path`` (the force-stub folder, then the release's source root),
   blocks non-loopback network connections and installs the stub finders;
2. makes torch report the declared GPUs and fakes ``nvidia-smi``;
3. imports ``sglang.srt.server_args`` (phase ``import``: any failure here is
   the harness's, never SGLang's verdict) and pins SGLang's hardware probes to
   the declared values;
4. for each command line, forks the warmed-up process and runs the release's
   own validation there (phase ``validate``): ``prepare_server_args(argv)``
   and, where the release has it (0.5.19+), ``server_args.resolve_once()``; then
   ``server_args.check_server_args()``, which every release's launch calls next
   (``entrypoints/engine.py``, before any process starts), so its checks judge too.
   The fork keeps every replay isolated from the others (SGLang keeps global
   state) while the 10-20 s of importing torch and SGLang is paid once; a fork
   that outlives its time limit is killed;
5. classifies each outcome (:mod:`verdicts`) and hands it back through a pipe the fork cannot reach once
   it is done: fork -> this process (:func:`run_forked`), this process -> the service
   (the cold runner's ``result_fd``, the warm worker's protocol stream). After each fork,
   any other process left in the sandbox's PID namespace is killed and reported
   (``leftover_processes``): a warm worker that reports one is retired by the pool.

Before anything SGLang parses is used, :mod:`guard` checks the namespace its real
parser produced (no ``trust_remote_code``, no ``--config``, the model paths only the
generated folders) and makes transformers' remote-code loaders refuse; a job that tripped
either is answered ``harness_error`` with phase ``unsafe``, never ``passed``.

``serve.py`` (next to this file), the warm worker of :mod:`service.replay.pool`,
does steps 1-3 once, then validates one job per fork as in step 4 (:func:`run_forked`).
Neither imports ``sglang_triage``: only the release, the stubs and third-party packages.
The scripts of this folder import each other by bare name (this folder is ``sys.path[0]``
when the script starts; :func:`setup` removes it), and by their package name in unit tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

try:  # run as a script in the sandbox: this folder is sys.path[0]
    import guard
    import probes
    import verdicts
    from values import dump_fields
except ImportError:  # imported as service.replay.child.runner (unit tests)
    from service.replay.child import guard, probes, verdicts  # type: ignore[no-redef]
    from service.replay.child.values import dump_fields  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
#: a job's start-up probe request (JSON in its environment; ``service.replay.probes``)
PROBE_ENV = "TRIAGE_REPLAY_STARTUP"


def setup(cfg: dict[str, Any], roots: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Stubs, hardware, import: (``sglang.srt.server_args`` or None, setup report)."""
    t0 = time.perf_counter()
    force_dir = cfg["stub_dirs"][0]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != str(HERE)]
    sys.path[0:0] = [force_dir, cfg["release_root"]]
    guard.install_socket_guard()

    import _replay_stubkit as kit

    kit.FORCED_FAILURE = cfg.get("forced_failure")
    kit.HARDWARE.update(cfg.get("hardware") or {})
    finders = kit.install(set(cfg["force_stubs"]), set(cfg["fallback_stubs"]))
    report: dict[str, Any] = {"phase": "setup", "timings": {}}
    roots["finders"] = finders
    try:
        import _replay_compat
        import _replay_hw as hw

        hw.patch_torch(cfg.get("hardware") or {})
        if cfg.get("hardware"):
            hw.patch_subprocess(cfg["hardware"])
        report["shims"] = (
            _replay_compat.patch_transformers()
            + _replay_compat.patch_torch_library({r for r in cfg["force_stubs"] if "." not in r})
            + _replay_compat.patch_torch_cpu()
        )
        report["timings"]["setup_s"] = time.perf_counter() - t0

        report["phase"] = "import"
        t1 = time.perf_counter()
        import sglang.srt.server_args as sa

        report["timings"]["import_s"] = time.perf_counter() - t1
        report["code_guard"] = guard.install_code_guard()
        report["import_consulted"] = {m: sorted(f) for m, f in kit.IMPORT_CONSULTED.items()}
        if cfg.get("hardware"):
            memory = cfg["hardware"].get("memory_mib")
            common = sys.modules.get("sglang.srt.utils.common")
            roots["original_probes"] = {  # a warm worker's forks may pin them anew
                name: getattr(common, name)
                for name in [
                    *(cfg.get("probes") or {}),
                    "get_device_memory_capacity",
                    "get_nvgpu_memory_capacity",
                ]
                if callable(getattr(common, name, None))
            }
            report["probe_disagreements"] = hw.patch_probes(cfg.get("probes") or {}, memory)
        return sa, report
    except BaseException as exc:
        info = verdicts.classify(exc, roots)
        info["status"] = "harness_error"
        info["harness_reason"] = (
            f"failed while {report['phase']}ing the release: "
            f"{info['harness_reason'] or info['exception_type']}"
        )
        report.update(info)
        report["stubs_served"] = _served(roots)
        return None, report


def _served(roots: dict[str, Any]) -> list[str]:
    return sorted({n for f in roots.get("finders", ()) for n in f.served})


def validate(
    sa: Any, argv: list[str], roots: dict[str, Any], startup: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the release's own validation on ``argv`` and classify the outcome; when it
    passed and ``startup`` asks for a probe, run it (:mod:`probes`) on the result."""
    result: dict[str, Any] = {"phase": "validate"}
    t0 = time.perf_counter()
    stderr = io.StringIO()
    result["ran"] = "prepare_server_args"
    try:
        with contextlib.redirect_stderr(_Tee(stderr, sys.stderr)):
            server_args = sa.prepare_server_args(list(argv))
        resolve = getattr(server_args, "resolve_once", None)
        if callable(resolve):
            result["ran"] = "prepare_server_args + resolve_once"
            resolve()
        # the launch's own next step (entrypoints/engine.py: server_args.check_server_args())
        late = getattr(server_args, "check_server_args", None)
        if callable(late):
            result["ran"] += " + check_server_args"
            with contextlib.redirect_stderr(_Tee(stderr, sys.stderr)):
                late()
        result["status"] = "passed"
        result["server_args"] = dump_fields(server_args)
        if startup:
            result["ran"] += f" + probe {startup.get('family')}"
            t1 = time.perf_counter()
            with contextlib.redirect_stderr(_Tee(stderr, sys.stderr)):
                result.update(probes.run_probe(server_args, startup, roots, verdicts.classify))
            result["probe_s"] = time.perf_counter() - t1
    except SystemExit as exc:
        usage = stderr.getvalue()
        if exc.code == 2 or "usage:" in usage:
            result.update(
                status="argparse_error",
                exception_type="SystemExit",
                exit_code=exc.code,
                message=_argparse_message(usage),
                usage=_clip(usage),
            )
        else:
            result.update(verdicts.classify(exc, roots))
            result["status"] = "harness_error"
            result["harness_reason"] = f"SystemExit({exc.code!r}) during validation"
    except guard.UnsafeArgv as exc:
        result.update(verdicts.unsafe(str(exc)))
    except BaseException as exc:
        result.update(verdicts.classify(exc, roots))
    if guard.EVENTS:  # even when SGLang swallowed the refusal (DFLASH) and went on
        result.pop("server_args", None)
        result.update(
            verdicts.unsafe(
                "replay refused: the release tried to load code from a model "
                f"folder ({', '.join(sorted(set(guard.EVENTS)))})"
            )
        )
    result["timings"] = {"validate_s": time.perf_counter() - t0}
    if "probe_s" in result:
        result["timings"]["probe_s"] = result.pop("probe_s")
    result["stubs_served"] = _served(roots)
    return result


def _send(fd: int, result: dict[str, Any]) -> None:
    data = (json.dumps(result, default=repr) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def run_forked(
    sa: Any, job: dict[str, Any], roots: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Validate one job in a forked copy of the warmed-up process, killed after ``timeout_s``;
    its result comes back through a pipe. Then every other process left in the sandbox is
    killed and counted in ``leftover_processes``."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork: own folder and log file, validate, send, leave without cleanup
        try:
            os.close(read_fd)
            for keep in roots.get("close_in_fork", ()):  # the runner's own result streams
                with contextlib.suppress(OSError):
                    os.close(keep)
            if job.get("workdir"):  # a warm job's own folder (HOME, TMPDIR, cwd)
                os.chdir(job["workdir"])
                os.environ.update(HOME=job["workdir"], TMPDIR=job["workdir"])
            fd = os.open(job["log_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            _limit_cpu(timeout_s)
            del guard.EVENTS[:]
            guard.install_argv_guard(job.get("allowed_paths") or [])
            os.environ.update({str(k): str(v) for k, v in (job.get("env") or {}).items()})
            startup = _startup_request(os.environ.pop(PROBE_ENV, None) or roots.get("startup"))
            hook = roots.get("apply_hardware")  # the warm worker's (serve.serve)
            repatched = hook(job, roots) if hook is not None else None
            if job.get("payload"):  # tests only (the pool's test hook): hostile code in a fork
                import runpy

                with contextlib.suppress(Exception):
                    runpy.run_path(job["payload"], run_name="__payload__")
            before = set(sys.modules) if job.get("report_modules") else None
            read = getattr(sys.modules.get("_replay_stubkit"), "IMPORT_CONSULTED", {})
            read_before = set(read)
            result = validate(sa, job["argv"], roots, startup)
            if repatched is not None:
                result["repatched"] = True
                result["probe_disagreements"] = repatched
            if before is not None:
                result["new_modules"] = sorted(set(sys.modules) - before)
                result["import_consulted"] = {
                    m: sorted(f) for m, f in read.items() if m not in read_before
                }
            _send(write_fd, result)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                _send(write_fd, verdicts.runner_failure(exc))
        finally:
            os._exit(0)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    buf, status, timed_out = bytearray(), 0, False
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(read_fd, 1 << 20):
                buf += chunk
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            timed_out = True
            break
        time.sleep(0.02)
    leftovers = guard.kill_leftovers(set())  # before the rest of the pipe is read
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(read_fd, 1 << 20):
            buf += chunk
    os.close(read_fd)
    line = bytes(buf).split(b"\n", 1)[0]
    try:
        result = json.loads(line) if line and not timed_out else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        result = {
            "status": "harness_error",
            "phase": "timeout" if timed_out else "crash",
            "harness_reason": f"validation did not finish within {timeout_s:.0f}s (killed)"
            if timed_out
            else f"the validating process died (wait status {status})",
        }
    if leftovers:
        result["leftover_processes"] = len(leftovers)
    return result


def _startup_request(raw: str | None) -> dict[str, Any] | None:
    """A job's probe request from its environment's JSON (None when absent or unreadable)."""
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _limit_cpu(timeout_s: float) -> None:
    """Cap this fork's own CPU seconds near its wall-clock limit (the sandbox's cap is the
    long-lived worker's); SIGXCPU ends a runaway fork even if the parent's clock is late."""
    with contextlib.suppress(ValueError, OSError):
        _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        want = int(timeout_s) + 5
        if hard == resource.RLIM_INFINITY or want < hard:
            resource.setrlimit(resource.RLIMIT_CPU, (want, hard))


def _clip(text: str, head: int = 2500, tail: int = 1500) -> str:
    """The start (``usage: ...``) and the end (``error: ...``) of a long text."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


def _argparse_message(usage: str) -> str:
    lines = [ln for ln in usage.strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if ": error:" in line:
            return line.split(": error:", 1)[1].strip()
    return lines[-1] if lines else ""


class _Tee(io.TextIOBase):
    """Writes to two streams (argparse's usage goes to the capture and to the log)."""

    def __init__(self, a: io.StringIO, b: Any) -> None:
        self._a, self._b = a, b

    def write(self, s: str) -> int:
        self._a.write(s)
        with contextlib.suppress(Exception):
            self._b.write(s)
        return len(s)

    def flush(self) -> None:
        with contextlib.suppress(Exception):
            self._b.flush()


def main() -> int:
    """The cold runner: one result line ``{"index", "result"}`` per job on the descriptor
    ``result_fd`` (a pipe the service reads; forks close it first thing), plus
    ``{"options": ...}`` first when ``dump_options`` is set."""
    cfg = json.loads(Path(sys.argv[1]).read_text())
    jobs = cfg["jobs"]
    out_fd = int(cfg["result_fd"])
    roots: dict[str, Any] = {
        "release": os.path.abspath(cfg["release_root"]),
        "stubs": [os.path.abspath(d) for d in cfg["stub_dirs"]],
        "close_in_fork": (out_fd,),
        "startup": os.environ.pop(PROBE_ENV, None),  # read before SGLang is imported
    }
    if cfg.get("test_payload"):  # tests only: run a script inside the sandbox, before all else
        import runpy

        with contextlib.suppress(BaseException):
            runpy.run_path(cfg["test_payload"], run_name="__payload__")
    done: set[int] = set()
    try:
        sa, report = setup(cfg, roots)
        if sa is not None and cfg.get("dump_options"):
            _send(out_fd, {"options": guard.dump_options(sa)})
        for i, job in enumerate(jobs):
            if sa is None:
                result = report
            else:
                result = run_forked(sa, job, roots, float(cfg["job_timeout_s"]))
                result["setup"] = {
                    k: report.get(k) for k in ("timings", "shims", "probe_disagreements")
                }
            _send(out_fd, {"index": i, "result": result})
            done.add(i)
    except BaseException as exc:
        for i in range(len(jobs)):
            if i not in done:
                with contextlib.suppress(Exception):
                    _send(out_fd, {"index": i, "result": verdicts.runner_failure(exc)})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip atexit hooks and non-daemon threads the release may have started


if __name__ == "__main__":
    main()
