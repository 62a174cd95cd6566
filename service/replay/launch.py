"""How a replay child process is launched: its script, stub folders, environment, log tail.

Shared by the cold path (:mod:`service.replay.harness`, one ``child.py`` per batch) and the
warm pool (:mod:`service.replay.pool`, one ``child_serve.py`` per worker), so that both run
the child with the same stubs and the same clean environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from service.engine import HardwareProfile

__all__ = ["CHILD", "CHILD_SERVE", "HARNESS_DIR", "STUB_DIRS"]

HARNESS_DIR = Path(__file__).resolve().parent
#: the cold child script (``python child.py <config>``)
CHILD = HARNESS_DIR / "child.py"
#: the warm worker script (``python child_serve.py <config>``, started by the pool)
CHILD_SERVE = HARNESS_DIR / "child_serve.py"
STUB_DIRS = (HARNESS_DIR / "stubs" / "force", HARNESS_DIR / "stubs" / "fallback")
_LOG_TAIL_LINES = 40


def _child_env(tmp: Path, tree: Path, hw: HardwareProfile | None,
               extra: Mapping[str, str] | None) -> dict[str, str]:
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
    env.update(_extra_env(extra))
    return env


def _extra_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The caller's variables a replay may set (never ``PYTHONPATH``, ``HOME``, ``PATH``)."""
    return {key: str(value) for key, value in (extra or {}).items()
            if key.isidentifier() and key not in ("PYTHONPATH", "HOME", "PATH")}


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
