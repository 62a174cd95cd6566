"""The declared machine, injected into the replay subprocess (child side, stdlib + torch).

Three layers, applied in this order by the child:

1. :func:`patch_torch` (before SGLang is imported): the real CPU ``torch``
   answers ``torch.cuda.*`` and ``torch.version.cuda``/``hip`` as the declared
   GPUs would, so SGLang's own probes (``is_sm100_supported()``,
   ``get_device_sm()``, module constants such as ``_is_cuda``) compute the
   declared answer through their real code.
2. :func:`patch_subprocess`: ``nvidia-smi``/``rocm-smi`` queries (memory
   capacity, driver version, compute capability) get the profile's values;
   every other command runs normally.
3. :func:`patch_probes` (after import): the zero-argument helpers in
   ``sglang.srt.utils.common`` are replaced, in the defining module and in
   every ``sglang.*`` module that imported them by name, with the values the
   parent computed from the profile. Disagreements between SGLang's own answer
   (from layer 1) and the declared one are returned for the report.
"""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import _replay_stubkit as kit

_ORIG_RUN = subprocess.run
_ORIG_CHECK_OUTPUT = subprocess.check_output


def _noting(fact: str, fn: Any) -> Any:
    def answer(*args: Any, **kwargs: Any) -> Any:
        kit.consulted(fact)
        return fn(*args, **kwargs)

    return answer


def _maybe_fail(name: str) -> None:
    """Test hook: ``call:<name>`` makes this fake raise a plain ``ValueError``.

    The message deliberately looks like an ordinary validation error, so the
    child has to recognise it by where it was raised (a stub file), not by
    its text.
    """
    if f"call:{name}" == kit.FORCED_FAILURE:
        raise ValueError(f"{name}() failed: device query returned no value")


def _capability(hw: dict[str, Any]) -> tuple[int, int]:
    cap = hw.get("capability")
    return (int(cap[0]), int(cap[1])) if cap else (0, 0)


class _Props:
    """What ``torch.cuda.get_device_properties`` returns, for the declared GPU."""

    def __init__(self, hw: dict[str, Any]) -> None:
        self.name = hw["gpu"]
        self.major, self.minor = _capability(hw)
        self.total_memory = int(hw["memory_mib"]) * 1024 * 1024
        self.multi_processor_count = int(hw.get("sm_count", 132))
        self.gcnArchName = hw.get("gcn_arch", "")
        self.L2_cache_size = 50 * 1024 * 1024
        self.warp_size = 64 if hw.get("vendor") == "amd" else 32
        self.is_integrated = False
        self.uuid = "GPU-00000000-0000-0000-0000-000000000000"

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor})"


def _no_compile(model: Any = None, **options: Any) -> Any:
    """``torch.compile`` without dynamo/inductor: validation never runs compiled code."""
    if model is None:
        return lambda fn: fn
    return model


def patch_torch(hw: dict[str, Any]) -> None:
    """Make the real CPU torch report the declared GPUs (no-op for the ``cpu`` profile).

    ``torch.compile`` becomes the identity for every profile: SGLang decorates
    kernels with it at import time, and inductor would otherwise import the
    (stubbed) triton and fail inside torch.
    """
    import torch

    torch.compile = _no_compile  # type: ignore[assignment]
    if hw.get("vendor") not in ("nvidia", "amd"):
        return
    cuda = torch.cuda
    count = int(hw["count"])
    total = int(hw["memory_mib"]) * 1024 * 1024
    props = _Props(hw)
    if hw["vendor"] == "nvidia":
        torch.version.cuda = hw.get("cuda") or "12.9"
        torch.version.hip = None
    else:
        torch.version.cuda = None
        torch.version.hip = "6.4.43482"

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        _maybe_fail("mem_get_info")
        kit.consulted("memory")
        return int(total * 0.97), total

    fakes: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": _noting("count", lambda: count),
        "get_device_capability": _noting("capability", lambda device=None: _capability(hw)),
        "get_device_name": _noting("name", lambda device=None: hw["gpu"]),
        "get_device_properties": _noting("properties", lambda device=None: props),
        "mem_get_info": mem_get_info,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "synchronize": lambda device=None: None,
        "is_initialized": lambda: True,
        "init": lambda: None,
        "is_bf16_supported": lambda including_emulation=True: True,
        "memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "empty_cache": lambda: None,
        "get_arch_list": _noting("capability", lambda: [f"sm_{hw.get('sm') or 90}"]),
        "_lazy_init": lambda: None,
        "_get_nvml_device_index": lambda device=0: int(device or 0),
    }
    for name, fake in fakes.items():
        setattr(cuda, name, fake)


def _smi_value(field: str, hw: dict[str, Any]) -> str:
    major, minor = _capability(hw)
    values = {
        "memory.total": str(hw["memory_mib"]),
        "memory.used": "0",
        "memory.free": str(hw["memory_mib"]),
        "driver_version": hw.get("driver", "580.82.07"),
        "compute_cap": f"{major}.{minor}",
        "name": hw["gpu"],
        "index": "{i}",
        "pci.bus_id": "00000000:{i:02X}:00.0",
    }
    return values.get(field.strip(), "[N/A]")


def _fake_smi(cmd: list[str], hw: dict[str, Any]) -> tuple[int, str]:
    _maybe_fail("nvidia-smi")
    kit.consulted("nvidia-smi")
    query = next((a.split("=", 1)[1] for a in cmd if a.startswith("--query-gpu=")), None)
    if query is None:
        return 0, ""
    fields = query.split(",")
    rows = [", ".join(_smi_value(f, hw).format(i=i) for f in fields) for i in range(hw["count"])]
    return 0, "\n".join(rows) + "\n"


def patch_subprocess(hw: dict[str, Any]) -> None:
    """Answer ``nvidia-smi --query-gpu=...`` from the profile; other commands run for real."""
    vendor = hw.get("vendor")

    def _argv(args: Any, kwargs: dict[str, Any]) -> list[str]:
        cmd = args[0] if args else kwargs.get("args", [])
        if isinstance(cmd, str):
            return cmd.split()
        return [str(c) for c in cmd]

    def run(*args: Any, **kwargs: Any) -> Any:
        argv = _argv(args, kwargs)
        tool = argv[0].rsplit("/", 1)[-1] if argv else ""
        if tool in ("nvidia-smi", "rocm-smi", "amd-smi"):
            code, out = (
                _fake_smi(argv, hw) if vendor == "nvidia" and tool == "nvidia-smi" else (127, "")
            )
            if code == 127:
                raise FileNotFoundError(2, "No such file or directory", tool)
            text = bool(
                kwargs.get("text") or kwargs.get("universal_newlines") or kwargs.get("encoding")
            )
            stdout: Any = out if text else out.encode()
            return subprocess.CompletedProcess(argv, code, stdout, "" if text else b"")
        return _ORIG_RUN(*args, **kwargs)

    def check_output(*args: Any, **kwargs: Any) -> Any:
        argv = _argv(args, kwargs)
        if argv and argv[0].rsplit("/", 1)[-1] in ("nvidia-smi", "rocm-smi", "amd-smi"):
            kwargs.setdefault("stdout", subprocess.PIPE)
            return run(*args, **kwargs).stdout
        return _ORIG_CHECK_OUTPUT(*args, **kwargs)

    subprocess.run = run  # type: ignore[assignment]
    subprocess.check_output = check_output  # type: ignore[assignment]


def _constant(name: str, value: Any) -> Any:
    def probe(*args: Any, **kwargs: Any) -> Any:
        _maybe_fail(name)
        kit.consulted(name)
        return value

    probe.__name__ = name
    probe.__qualname__ = name
    probe.__replay_stub__ = True  # type: ignore[attr-defined]
    probe.cache_clear = lambda: None  # type: ignore[attr-defined]
    return probe


def patch_probes(declared: dict[str, Any], memory_mib: float | None) -> dict[str, Any]:
    """Replace SGLang's hardware probes by the declared values, everywhere they were imported.

    Returns ``{probe: {"sglang": own answer, "declared": value}}`` for every
    probe whose own answer (computed through the patched torch) differed.
    """
    common = sys.modules.get("sglang.srt.utils.common")
    if common is None:
        return {}
    replacements: dict[int, Any] = {}
    disagreements: dict[str, Any] = {}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in declared.items()}
    if memory_mib:  # none for the cpu profile: SGLang reads this host's memory itself
        values["get_device_memory_capacity"] = memory_mib
        values["get_nvgpu_memory_capacity"] = memory_mib
    for name, value in values.items():
        original = getattr(common, name, None)
        if not callable(original):
            continue
        if not name.startswith("get_device_memory") and not name.startswith("get_nvgpu"):
            try:
                own = original()
            except Exception as exc:
                own = f"<{type(exc).__name__}: {exc}>"
            if isinstance(own, tuple):
                own = list(own)
            want = list(value) if isinstance(value, tuple) else value
            if own != want:
                disagreements[name] = {"sglang": own, "declared": want}
        replacements[id(original)] = _constant(name, value)
    for mod_name, mod in list(sys.modules.items()):
        if not isinstance(mod, types.ModuleType) or not mod_name.startswith("sglang"):
            continue
        for attr, obj in list(vars(mod).items()):
            fake = replacements.get(id(obj))
            if fake is not None:
                setattr(mod, attr, fake)
    return disagreements
