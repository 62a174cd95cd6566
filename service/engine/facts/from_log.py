"""The hardware a crash log shows, as the closest known :class:`HardwareProfile`.

:func:`~service.engine.logparse.gpus.find_gpus` reads GPU names, compute
capabilities, ROCm architectures, counts and memory from the log;
:func:`hardware_from_log` turns the best of them into a profile of
:data:`kb.hardware.BASES`, so that a triage without ``--hardware`` evaluates the
hardware probes (``is_sm100_supported()``, ``is_hip()``...) on the machine the
user ran, and replay pins them to the same profile:

* **by name first** (``NVIDIA H200``, ``RTX PRO 6000 Blac...``, ``AMD Instinct
  MI300X``; :data:`kb.hardware.GPU_NAME_BASES`), then by ROCm architecture
  (``gfx942`` -> ``mi300x``, ``gfx950`` -> ``mi355x``);
* **else by capability and memory**: the bases of that capability (else of its
  major, else the nearest), the one whose memory fits the printed total (or the
  ``avail mem`` lower bound) most tightly; without memory the one the docs list;
* **count**: ``CUDA_VISIBLE_DEVICES`` when set, else the GPUs listed, else the
  ``tp``/``pp``/``dp`` sizes of the ``ServerArgs`` dump or the command, else the
  base's usual count.

The profile keeps what the log printed (GPU name, capability, total memory), so
the facts are the machine's own; its *name* is the closest profile, which replay
and ``--hardware`` understand. :class:`LogHardware` carries the evidence line.
Pure: no I/O, no regular expressions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from kb.hardware import (
    AMD_CAPABILITY,
    BASES,
    GPU_NAME_BASES,
    LISTED,
    MAX_GPUS,
    HardwareProfile,
    make_profile,
)
from service.engine.logparse.gpus import GpuHint

__all__ = ["ROCM_ARCH_BASES", "LogHardware", "closest_base", "gpu_count", "hardware_from_log"]

#: ROCm ``gcnArchName`` -> profile base (MI325X shares gfx942; memory tells it apart)
ROCM_ARCH_BASES = {"gfx942": "mi300x", "gfx950": "mi355x"}
_LISTED_BASES = [n.rpartition("-x")[0] or n for n in LISTED]
_PARALLEL_FLAGS = {
    "tp": ("--tp", "--tp-size", "--tensor-parallel-size"),
    "pp": ("--pp", "--pp-size", "--pipeline-parallel-size"),
    "dp": ("--dp", "--dp-size", "--data-parallel-size"),
}


class LogHardware(BaseModel):
    """A hardware profile read from the log: the profile, the line that showed the GPU,
    and how the profile was chosen (``detail``)."""

    profile: HardwareProfile
    evidence: str
    detail: str


def _by_memory(candidates: list[str], total: int | None, free: float | None) -> str:
    """The candidate whose memory fits the printed total (or lower bound) most tightly;
    without memory the first one the docs list, else the first."""
    if total:
        fits = [b for b in candidates if BASES[b][4] >= total * 0.95]
    elif free:
        fits = [b for b in candidates if BASES[b][4] >= free]
    else:
        listed = [b for b in candidates if b in _LISTED_BASES]
        return (listed or candidates)[0]
    if fits:
        return min(fits, key=lambda b: BASES[b][4])
    return max(candidates, key=lambda b: BASES[b][4])


def closest_base(hint: GpuHint) -> tuple[str, str] | None:
    """``(base, how)``: the :data:`kb.hardware.BASES` entry closest to ``hint``, or None.

    The name decides when it is known; else the ROCm architecture; else the compute
    capability with the memory (see the module docstring).
    """
    for rx, base in GPU_NAME_BASES:
        if rx.search(hint.name):
            if base in ("mi300x", "mi325x") and hint.memory_gb:  # same chip, 192 vs 256 GB
                base = _by_memory(["mi300x", "mi325x"], hint.memory_gb, None)
            return base, f"GPU name {hint.name}"
    if hint.arch in ROCM_ARCH_BASES:
        base = ROCM_ARCH_BASES[hint.arch]
        same = [b for b, cap in AMD_CAPABILITY.items()
                if cap == AMD_CAPABILITY[base] and b in BASES]
        return _by_memory(same, hint.memory_gb, hint.free_gb), f"ROCm architecture {hint.arch}"
    if hint.sm is None:
        return None
    cap = f"compute capability {hint.sm // 10}.{hint.sm % 10}"
    if hint.vendor == "amd":
        amd = [b for b, c in AMD_CAPABILITY.items() if c[0] * 10 + c[1] == hint.sm and b in BASES]
        return (_by_memory(amd, hint.memory_gb, hint.free_gb), cap) if amd else None
    nvidia = {b: row[2] for b, row in BASES.items() if row[1] == "nvidia" and row[2] is not None}
    same = [b for b, sm in nvidia.items() if sm == hint.sm]
    major = [b for b, sm in nvidia.items() if sm is not None and sm // 10 == hint.sm // 10]
    if not (same or major):
        gap = min(abs(sm - hint.sm) for sm in nvidia.values() if sm is not None)
        major = [b for b, sm in nvidia.items() if sm is not None and abs(sm - hint.sm) == gap]
    mem = hint.memory_gb or hint.free_gb
    how = cap + (f" and {mem:g} GB" + (" free" if not hint.memory_gb else "") if mem else "")
    return _by_memory(same or major, hint.memory_gb, hint.free_gb), how


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value.strip())
    return None


def _flag(argv: Sequence[str], names: tuple[str, ...]) -> str | bool | None:
    """The value of the last of ``names`` in ``argv`` (``--tp 8``, ``--tp=8``); True for a
    bare switch; None when absent."""
    found: str | bool | None = None
    for i, tok in enumerate(argv):
        name, eq, value = tok.partition("=")
        if name in names:
            if eq:
                found = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                found = argv[i + 1]
            else:
                found = True
    return found


def _parallel(server_args: Mapping[str, object] | None,
              command: Sequence[str] | None) -> tuple[int, str] | None:
    """GPUs the launch uses, ``tp * pp`` (times ``dp`` without DP attention), and how it
    was read; None when the log shows no parallel size."""
    sizes: dict[str, int] = {}
    where = ""
    sa = server_args or {}
    for key in _PARALLEL_FLAGS:
        v = _int(sa.get(f"{key}_size"))
        if v:
            sizes[key], where = v, "ServerArgs"
    dp_attention = sa.get("enable_dp_attention") is True
    if not sizes and command:
        for key, names in _PARALLEL_FLAGS.items():
            v = _int(_flag(command, names))
            if v:
                sizes[key], where = v, "the command"
        dp_attention = _flag(command, ("--enable-dp-attention",)) is True
    if not sizes:
        return None
    n = sizes.get("tp", 1) * sizes.get("pp", 1) * (1 if dp_attention else sizes.get("dp", 1))
    text = ", ".join(f"{k}_size={v}" for k, v in sizes.items())
    return n, f"{text} in {where}"


def gpu_count(hint: GpuHint, env: Mapping[str, str], server_args: Mapping[str, object] | None,
              command: Sequence[str] | None) -> tuple[int | None, str]:
    """``(count, how)``: ``CUDA_VISIBLE_DEVICES``, else the GPUs listed, else the parallel
    sizes; ``(None, "")`` when the log shows none of them."""
    cvd = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = [p for p in cvd.split(",") if p.strip()]
    if ids and all(p.strip().isdecimal() for p in ids):
        return len(ids), f"CUDA_VISIBLE_DEVICES={cvd}"
    if hint.count:
        return hint.count, f"{hint.count} GPUs listed"
    par = _parallel(server_args, command)
    if par is not None:
        return par
    return None, ""


def hardware_from_log(gpus: Sequence[GpuHint], *, env: Mapping[str, str] | None = None,
                      server_args: Mapping[str, object] | None = None,
                      command: Sequence[str] | None = None) -> LogHardware | None:
    """The closest known profile to the GPUs the log shows, or None when none is identified.

    The first GPU identified by name wins, else the first identified by ROCm
    architecture or capability. The profile keeps the log's GPU name, capability
    (NVIDIA) and total memory; its name is the closest base with the count.
    """
    picked: tuple[GpuHint, str, str] | None = None
    for hint in gpus:
        found = closest_base(hint)
        if found is None:
            continue
        if found[1].startswith("GPU name"):
            picked = (hint, *found)
            break
        if picked is None:
            picked = (hint, *found)
    if picked is None:
        return None
    hint, base, how = picked
    count, counted = gpu_count(hint, env or {}, server_args, command)
    if count is not None and not 1 <= count <= MAX_GPUS:
        count, counted = None, ""
    prof = make_profile(base, count)
    update: dict[str, object] = {}
    if found_name(hint):
        update["gpu"] = hint.name
    if hint.memory_gb:
        update["memory_gb"] = hint.memory_gb
    if hint.sm and prof.vendor == "nvidia":
        update["sm"] = hint.sm
    detail = f"{prof.name}: closest profile by {how}; " + (
        f"{prof.count} GPUs ({counted})" if counted else f"{prof.count} GPUs (the profile's usual count)")
    return LogHardware(profile=prof.model_copy(update=update), evidence=hint.evidence,
                       detail=detail)


def found_name(hint: GpuHint) -> bool:
    """True when the hint is a real GPU name (not a capability or ``gfx`` placeholder)."""
    return not (hint.name.startswith("GPU with compute capability") or hint.name == hint.arch)
