"""How a replay child process is launched: its script, stub folders, environment, log tail.

Shared by the cold path (:mod:`service.replay.batches`, one ``child/runner.py`` per batch) and
the warm pool (:mod:`service.replay.pool`, one ``child/serve.py`` per worker), so that both
run the child with the same stubs and the same clean environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.engine import HardwareProfile
from service.replay.errors import ReplayError

__all__ = [
    "CHILD",
    "CHILD_SERVE",
    "HARNESS_DIR",
    "STUB_DIRS",
    "child_env",
    "extra_env",
    "log_tail",
    "run_with_results",
]

HARNESS_DIR = Path(__file__).resolve().parent
#: the cold child script (``python child/runner.py <config>``; see :mod:`service.replay.child`)
CHILD = HARNESS_DIR / "child" / "runner.py"
#: the warm worker script (``python child/serve.py <config>``, started by the pool)
CHILD_SERVE = HARNESS_DIR / "child" / "serve.py"
STUB_DIRS = (HARNESS_DIR / "stubs" / "force", HARNESS_DIR / "stubs" / "fallback")
_LOG_TAIL_LINES = 40
#: bytes of result lines a cold child may send (a batch of full ServerArgs dumps fits)
_MAX_RESULTS = 256 << 20


def child_env(
    tmp: Path, tree: Path, hw: HardwareProfile | None, extra: Mapping[str, str] | None
) -> dict[str, str]:
    """The child's whole environment: offline Hugging Face, caches and ``HOME`` in ``tmp``, the
    force-stub folder then the release ``tree`` on ``PYTHONPATH``, the declared vendor's
    variables, and the caller's ``extra`` ones (:func:`extra_env`); nothing of the service's."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp), "TMPDIR": str(tmp), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
        "PYTHONPATH": os.pathsep.join([str(STUB_DIRS[0]), str(tree)]),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1", "SGLANG_DISABLE_REQUEST_LOGGING": "1",
        "TRITON_CACHE_DIR": str(tmp / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
        "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
    }  # fmt: skip
    if hw is not None and hw.vendor == "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    if hw is not None and hw.vendor == "nvidia":
        env["CUDA_HOME"] = "/usr/local/cuda"
    env.update(extra_env(extra))
    return env


def extra_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The caller's variables a replay may set (never ``PYTHONPATH``, ``HOME``, ``PATH``)."""
    return {
        key: str(value)
        for key, value in (extra or {}).items()
        if key.isidentifier() and key not in ("PYTHONPATH", "HOME", "PATH")
    }


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a child's log (empty when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_with_results(
    cmd: list[str],
    cfg: dict[str, Any],
    workdir: Path,
    env: dict[str, str],
    log: Path,
    timeout_s: float,
) -> tuple[list[dict[str, Any]], bool, int | None]:
    """Run a cold child (``cmd`` reads ``<workdir>/config.json``) and collect the JSON lines
    it writes on a pipe (``cfg["result_fd"]``, passed to it alone: the forks validating
    command lines close it first, so no job's code can forge another job's result).

    Returns (lines, killed at ``timeout_s``, exit status). The whole process group is
    killed on time-out (the sandbox's PID namespace takes everything inside with it).
    """
    read_fd, write_fd = os.pipe()
    cfg = {**cfg, "result_fd": write_fd}
    (workdir / "config.json").write_text(json.dumps(cfg))
    (workdir / "config.json").chmod(0o644)
    lines: list[dict[str, Any]] = []
    buf = bytearray()

    def reader() -> None:
        with os.fdopen(read_fd, "rb") as stream:
            while chunk := stream.read1(1 << 20):
                buf.extend(chunk)
                if len(buf) > _MAX_RESULTS:
                    return

    killed = False
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(write_fd,),
            )
        except OSError as exc:
            os.close(read_fd)
            raise ReplayError(f"cannot start the replay subprocess: {exc}") from exc
        finally:
            os.close(write_fd)
        thread = threading.Thread(target=reader, name="replay-results", daemon=True)
        thread.start()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        thread.join(timeout=10)
    for raw in bytes(buf).splitlines():
        with contextlib.suppress(ValueError):
            line = json.loads(raw)
            if isinstance(line, dict):
                lines.append(line)
    return lines, killed, proc.returncode
