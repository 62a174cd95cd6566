"""How a replay child's outcome becomes an answer (a script of the sandbox, stdlib only).

:func:`classify` decides whether an exception is SGLang's own verdict (``raised``, with
the release's frames) or the harness's problem (``harness_error``, :func:`harness_reason`:
a stub, an import, the network, a real CUDA call, a lazy import failing at module level);
:func:`unsafe` and :func:`runner_failure` are the answers for a job the guards refused
and for a runner that failed itself. Imported by bare name by ``runner.py`` and
``serve.py`` inside the sandbox, and as ``service.replay.child.verdicts`` by unit tests.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

try:  # run as a script in the sandbox: this folder is sys.path[0]
    from guard import NetworkBlocked
except ImportError:  # imported as service.replay.child.verdicts (unit tests)
    from service.replay.child.guard import NetworkBlocked  # type: ignore[no-redef]

__all__ = ["classify", "harness_reason", "runner_failure", "unsafe"]

HERE = Path(__file__).resolve().parent
#: the child's own scripts (this folder): a frame in one is the harness's
_HARNESS_FILES = {str(path.resolve()) for path in HERE.glob("*.py")}


def _where(filename: str, roots: dict[str, str]) -> tuple[str, str | None]:
    """(kind, package-relative path) of a traceback frame's file."""
    path = os.path.abspath(filename)
    for stub_dir in roots["stubs"]:
        if path.startswith(stub_dir + os.sep):
            return "stub", os.path.relpath(path, stub_dir)
    if path in _HARNESS_FILES:
        return "harness", os.path.basename(path)
    release = roots["release"] + os.sep
    if path.startswith(release):
        return "sglang", os.path.relpath(path, roots["release"]).replace(os.sep, "/")
    if "site-packages" in path or "dist-packages" in path:
        rel = path.split("-packages" + os.sep, 1)[1].replace(os.sep, "/")
        return "third_party", rel
    if filename.startswith("<"):
        return "internal", filename
    return "stdlib", os.path.basename(path)


def _frames(exc: BaseException, roots: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for fs in traceback.extract_tb(exc.__traceback__):
        kind, rel = _where(fs.filename, roots)
        out.append(
            {
                "kind": kind,
                "path": rel,
                "line": fs.lineno,
                "function": fs.name,
                "code": (fs.line or "").strip()[:300],
            }
        )
    return out


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 10:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


_STUB_WORDS = ("replay stub", "StubAttr", "StubModule", "_replay_stubkit", "_replay_hw")
_GPU_WORDS = (
    "Torch not compiled with CUDA",
    "CUDA driver",
    "no CUDA GPUs",
    "CUDA error",
    "NVML",
    "nvidia-smi",
    "Found no NVIDIA driver",
)


def _lazy_import_frame(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first module-level SGLang frame below validation code (a lazy import), if any."""
    seen_sglang = False
    for frame in frames:
        if frame["kind"] != "sglang":
            continue
        if seen_sglang and frame["function"] == "<module>":
            return frame
        seen_sglang = True
    return None


def harness_reason(exc: BaseException, frames: list[dict[str, Any]]) -> str | None:
    """Why ``exc`` is the harness's fault rather than SGLang's verdict, or None."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NetworkBlocked):
        return "network access was attempted (blocked by the harness)"
    if isinstance(exc, ImportError):
        return f"import failed: {text} (a package missing here or a stub lacking a name)"
    if any(w in text for w in _STUB_WORDS):
        return f"operation on a stub object: {text}"
    lazy = _lazy_import_frame(frames)
    if lazy is not None:
        return (
            f"failed while importing {lazy['path']} (module level, line {lazy['line']}): "
            f"{text}; import-time failures come from the environment, not from validation"
        )
    if frames:
        last = frames[-1]
        if last["kind"] in ("stub", "harness"):
            return f"raised inside the {last['kind']} ({last['path']}:{last['line']})"
        if last["kind"] == "third_party" and last["path"].startswith("torch/cuda"):
            return f"a real CUDA call reached CPU torch ({last['path']}:{last['line']})"
    if any(w in text for w in _GPU_WORDS):
        return f"needs a real GPU or driver: {text}"
    if not any(f["kind"] == "sglang" for f in frames):
        return "raised outside SGLang's code"
    return None


def classify(exc: BaseException, roots: dict[str, str]) -> dict[str, Any]:
    """``raised`` (SGLang's own verdict) or ``harness_error``, with SGLang's frames."""
    frames = _frames(exc, roots)
    reason = harness_reason(exc, frames)
    if reason is None:
        for inner in _chain(exc)[1:]:
            inner_reason = harness_reason(inner, _frames(inner, roots))
            if inner_reason is not None and (
                isinstance(inner, ImportError)
                or "stub" in inner_reason
                or "harness" in inner_reason
                or "network" in inner_reason
            ):
                reason = f"caused by: {inner_reason}"
                break
    origin = next((f for f in reversed(frames) if f["kind"] == "sglang"), None)
    return {
        "status": "harness_error" if reason else "raised",
        "exception_type": type(exc).__name__,
        "exception_module": type(exc).__module__,
        "message": str(exc)[:4000],
        "frames": [f for f in frames if f["kind"] == "sglang"],
        "all_frames": frames[-40:],
        "origin": frames[-1] if frames else None,
        "sglang_origin": origin,
        "harness_reason": reason,
    }


def unsafe(reason: str) -> dict[str, Any]:
    """The answer for a job the guards refused (never SGLang's verdict, never ``passed``)."""
    return {
        "status": "harness_error",
        "phase": "unsafe",
        "harness_reason": reason[:500],
        "exception_type": None,
        "message": None,
        "frames": [],
        "all_frames": [],
    }


def runner_failure(exc: BaseException) -> dict[str, Any]:
    """The answer for a job the runner itself failed on (phase ``harness``), with its frames."""
    return {
        "status": "harness_error",
        "phase": "harness",
        "exception_type": type(exc).__name__,
        "message": str(exc)[:4000],
        "harness_reason": "the replay runner itself failed",
        "all_frames": [
            {
                "kind": "harness",
                "path": fs.filename,
                "line": fs.lineno,
                "function": fs.name,
                "code": (fs.line or "")[:300],
            }
            for fs in traceback.extract_tb(exc.__traceback__)
        ],
    }
