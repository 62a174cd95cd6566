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

The model fields SGLang prints while it starts are read here too
(:func:`model_fields_from_log`): the loaded model class and the checkpoint's
quantization from ``Load weight end. ... type=DeepseekV3ForCausalLM, quant=fp8``,
and ``context_len``/``max_total_num_tokens`` from the scheduler's
``max_total_num_tokens=..., context_len=...`` line; :func:`log_model_facts` makes
them facts with provenance "printed in the log". The last start-up in the log wins
(it is the attempt that crashed).
Pure: no I/O, no regular expressions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

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
from service.engine.expr.interpreter import Provenance, Value
from service.engine.logparse.gpus import GpuHint

__all__ = [
    "ROCM_ARCH_BASES",
    "LogHardware",
    "LogModelField",
    "closest_base",
    "gpu_count",
    "field_rows",
    "hardware_from_log",
    "log_lines",
    "log_model_facts",
    "model_fields_from_log",
]

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
        same = [
            b for b, cap in AMD_CAPABILITY.items() if cap == AMD_CAPABILITY[base] and b in BASES
        ]
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


def _parallel(
    server_args: Mapping[str, object] | None, command: Sequence[str] | None
) -> tuple[int, str] | None:
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


def gpu_count(
    hint: GpuHint,
    env: Mapping[str, str],
    server_args: Mapping[str, object] | None,
    command: Sequence[str] | None,
) -> tuple[int | None, str]:
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


def hardware_from_log(
    gpus: Sequence[GpuHint],
    *,
    env: Mapping[str, str] | None = None,
    server_args: Mapping[str, object] | None = None,
    command: Sequence[str] | None = None,
) -> LogHardware | None:
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
        f"{prof.count} GPUs ({counted})"
        if counted
        else f"{prof.count} GPUs (the profile's usual count)"
    )
    return LogHardware(
        profile=prof.model_copy(update=update), evidence=hint.evidence, detail=detail
    )


def found_name(hint: GpuHint) -> bool:
    """True when the hint is a real GPU name (not a capability or ``gfx`` placeholder)."""
    return not (hint.name.startswith("GPU with compute capability") or hint.name == hint.arch)


# ----------------------------------------------------------------- model fields printed


class LogModelField(BaseModel):
    """A model field SGLang printed while it started: ``name`` (``loaded_model_class``,
    ``quantization``, ``context_len``, ``max_total_num_tokens``), its value, the line."""

    name: str
    value: int | str
    evidence: str


#: (marker of the start-up line, printed key -> field name, integer or identifier)
_MODEL_LINES: tuple[tuple[str, dict[str, tuple[str, bool]]], ...] = (
    (
        "Load weight end.",
        {
            "type": ("loaded_model_class", False),
            "quant": ("quantization", False),
            "quant_algo": ("quant_algo", False),
        },
    ),
    (
        "max_total_num_tokens=",
        {
            "max_total_num_tokens": ("max_total_num_tokens", True),
            "context_len": ("context_len", True),
        },
    ),
)
#: the facts each field answers (``self.model_config.context_len`` and a ``model_config``
#: parameter key alike); the rest are bare names for rule cards
_FIELD_KEYS = {
    "context_len": ("model_config.context_len", "get_model_config().context_len"),
    "quantization": ("checkpoint_quantization",),
    "loaded_model_class": ("checkpoint_loaded_class",),
    "max_total_num_tokens": ("checkpoint_max_total_num_tokens",),
}
_MAX_LINE_CHARS = 2000
_MAX_VALUE_CHARS = 100


def log_lines(payload: object, max_chars: int = 4 * 1024 * 1024) -> list[str]:
    """The lines of a triage payload's log: a text, bytes, or a report ``{"log": ...}`` (also
    as JSON text); at most ``max_chars`` characters are looked at."""
    if isinstance(payload, bytes):
        payload = payload[:max_chars].decode("utf-8", "replace")
    if isinstance(payload, str) and payload.lstrip().startswith("{"):
        try:
            loaded = json.loads(payload[:max_chars])
        except (ValueError, RecursionError):
            loaded = None
        payload = loaded if isinstance(loaded, dict) else payload
    if isinstance(payload, dict):
        payload = payload.get("log")
    return payload[:max_chars].splitlines() if isinstance(payload, str) else []


def _field_value(raw: str, integer: bool) -> int | str | None:
    text = raw.strip()
    if integer:
        return int(text) if text.isdecimal() and len(text) <= 18 else None
    ok = 0 < len(text) <= _MAX_VALUE_CHARS and text.replace("_", "").replace("-", "").isalnum()
    return text if ok else None


def model_fields_from_log(lines: Sequence[str]) -> list[LogModelField]:
    """The model fields of the last start-up the log shows (see the module docstring)."""
    found: dict[str, LogModelField] = {}
    for line in lines:
        for marker, keys in _MODEL_LINES:
            at = line.find(marker)
            if at < 0:
                continue
            text = line[at : at + _MAX_LINE_CHARS]
            for part in text.split(","):
                key, eq, raw = part.partition("=")
                field = keys.get(key.strip().rpartition(" ")[2]) if eq else None
                if field is None:
                    continue
                value = _field_value(raw, field[1])
                if value is not None:
                    found[field[0]] = LogModelField(
                        name=field[0], value=value, evidence=line.strip()[:300]
                    )
    algo = str(found.pop("quant_algo").value).upper() if "quant_algo" in found else ""
    quant = found.get("quantization")
    if quant is not None and str(quant.value).lower() == "modelopt":  # SGLang's own name
        kind = "fp4" if "FP4" in algo else "fp8" if "FP8" in algo else ""
        found["quantization"] = (
            quant.model_copy(update={"value": f"modelopt_{kind}"}) if kind else quant
        )
    return list(found.values())


def log_model_facts(fields: Sequence[LogModelField]) -> dict[str, Value]:
    """Evaluator facts for the printed model fields, with provenance "printed in the log"."""
    out: dict[str, Value] = {}
    for f in fields:
        prov = Provenance("fact", f"{f.name} {f.value!r} printed in the log: {f.evidence[:160]}")
        for key in _FIELD_KEYS.get(f.name, ()):
            out[key] = Value(f.value, prov)
    return out


def field_rows(fields: Sequence[LogModelField], read: set[str] | None) -> list[dict[str, Any]]:
    """``TriageResult.model_facts`` rows (as dicts) for the printed fields; ``used`` when the
    evaluated condition read one of the field's facts."""
    return [
        {
            "name": f.name,
            "value": f.value,
            "source": "log",
            "detail": f.evidence,
            "used": bool(read and read.intersection(_FIELD_KEYS.get(f.name, ()))),
        }
        for f in fields
    ]
