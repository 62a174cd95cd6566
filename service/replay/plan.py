"""Everything the parent decides before a replay starts: machine, stubs, model folders, argv.

* :func:`hardware_payload` turns a declared :class:`HardwareProfile` into what
  the child's fakes answer (capability, memory in MiB, SM count, driver) and
  :func:`probe_values` into the values SGLang's probes are pinned to; both
  follow :mod:`service.engine.facts.core` so replay and the static engine
  agree on what "rtx-pro-6000-x8" means.
* :func:`stub_plan` says which modules are stubbed: *force* (GPU-only, stubbed
  even when installed) per vendor, *fallback* (only when missing here).
* :func:`substitute_argv` swaps the user's ``--model-path`` (and a
  speculative draft path) for generated config-only folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from kb.hardware import AMD_CAPABILITY
from service.engine import HardwareProfile, model_arch_for
from service.engine import probe_values as engine_probe_values
from service.replay.model_configs import MODEL_CONFIGS, draft_config, write_config_dir

__all__ = [
    "ALWAYS_DROPPED", "FALLBACK_STUBS", "FORCE_STUBS", "drop_unsafe", "hardware_payload", "probe_values", "stub_plan",
    "substitute_argv",
]  # fmt: skip

# streaming multiprocessors per GPU (torch's multi_processor_count), by profile base name
_SM_COUNT = {
    "h100": 132, "h200": 132, "h20": 78, "h800": 132, "gh200": 132, "b200": 148, "gb200": 152,
    "b300": 148, "gb300": 152, "rtx-pro-6000": 188, "rtx-5090": 170, "dgx-spark": 48,
    "a100": 108, "l40s": 142, "mi300x": 304, "mi325x": 304, "mi355x": 256,
}  # fmt: skip
_GCN_ARCH = {"mi300x": "gfx942", "mi325x": "gfx942", "mi355x": "gfx950"}


#: GPU-only packages: stubbed even if installed (they cannot run without a device)
FORCE_STUBS: dict[str, tuple[str, ...]] = {
    "nvidia": ("triton", "flashinfer", "sgl_kernel", "deep_gemm", "cuda", "pynvml", "tvm_ffi",
               "cutlass", "cuda_python"),
    # vllm: SGLang's ROCm images are built on ROCm's vllm images (rocm.Dockerfile's
    # BASE_IMAGE_942="rocm/sgl-dev:vllm20250114" for 0.5.5), and releases up to 0.5.5
    # refuse to import on AMD without it ("vllm is required when SGLANG_USE_AITER is set
    # to False", layers/quantization/fp8_kernel.py)
    "amd": ("triton", "aiter", "sgl_kernel", "vllm"),
    "cpu": ("triton",),
}
#: packages SGLang imports unconditionally on the validation path, stubbed only when this
#: venv lacks them. Kept to what is needed: stubbing an *optional* package (mooncake,
#: granian...) would make SGLang believe it is installed and change its choices.
#: ``xgrammar`` is no such package: every release pins it in its wheel's requirements
#: (0.5.5: 0.1.25 ... 0.5.23: 0.2.7), so a real install always has it, and 0.5.16's
#: ``server_args.py`` imports it at module level (``function_call/inkling_detector.py``).
FALLBACK_STUBS: tuple[str, ...] = (
    "psutil", "msgspec", "zmq", "IPython", "partial_json_parser", "torchvision", "dill",
    "sentencepiece", "compressed_tensors", "gguf", "tvm_ffi", "xgrammar", "einops",
)


def _base(hw: HardwareProfile) -> str:
    return hw.name.rpartition("-x")[0] or hw.name


def hardware_payload(hw: HardwareProfile | None) -> dict[str, Any]:
    """What the child's torch/nvidia-smi/NVML fakes report for ``hw`` ({} for none)."""
    if hw is None:
        return {}
    base = _base(hw)
    cap: tuple[int, int] | None = None
    if hw.vendor == "nvidia" and hw.sm is not None:
        cap = (hw.sm // 10, hw.sm % 10)
    elif hw.vendor == "amd":
        cap = AMD_CAPABILITY.get(base, (9, 4))
    return {
        "name": hw.name, "gpu": hw.gpu, "vendor": hw.vendor, "sm": hw.sm,
        "count": hw.count, "memory_mib": hw.memory_gb * 1024 or None, "cuda": hw.cuda,
        "capability": list(cap) if cap else None, "sm_count": _SM_COUNT.get(base, 132),
        "gcn_arch": _GCN_ARCH.get(base, ""), "driver": "580.82.07",
    }  # fmt: skip


def probe_values(hw: HardwareProfile | None) -> dict[str, Any]:
    """Values SGLang's zero-argument hardware probes are pinned to (same as the engine's facts)."""
    if hw is None:
        return {}
    values = engine_probe_values(hw, True)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}


def stub_plan(hw: HardwareProfile | None) -> tuple[list[str], list[str]]:
    """(force, fallback) module roots for a replay on ``hw``."""
    vendor = hw.vendor if hw is not None else "cpu"
    force = list(FORCE_STUBS.get(vendor, ("triton",)))
    fallback = [m for m in FALLBACK_STUBS if m not in force]
    return force, fallback


# ------------------------------------------------------------------ model folders

_MODEL_FLAGS = ("--model-path", "--model")
_DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")


def _flag_value(argv: list[str], names: tuple[str, ...]) -> tuple[int, str | None, bool]:
    """(index, value, inline) of the last occurrence of one of ``names``; (-1, None, False)."""
    found: tuple[int, str | None, bool] = (-1, None, False)
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                found = (i, argv[i + 1], False)
            elif arg.startswith(name + "="):
                found = (i, arg.split("=", 1)[1], True)
    return found


def _set_flag(argv: list[str], index: int, inline: bool, value: str) -> None:
    if inline:
        argv[index] = argv[index].split("=", 1)[0] + "=" + value
    else:
        argv[index + 1] = value


def _stable_dir(home: Path, label: str, config: dict[str, Any]) -> Path:
    """A config-only model folder named by its content, written once (atomically)."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    dest = home / "replay-models" / f"{label}-{digest}"
    if (dest / "config.json").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    write_config_dir(tmp, config)
    try:
        os.replace(tmp, dest)
    except OSError:  # another replay wrote it first
        for child in tmp.iterdir():
            child.unlink()
        tmp.rmdir()
    return dest


#: Flags replay always drops: they name files SGLang would read or code it would run.
ALWAYS_DROPPED = ("--config", "--trust-remote-code")
_PATH_SUFFIXES = ("-path", "-paths", "-dir", "-file", "-folder")
_REPLACED = (*_MODEL_FLAGS, *_DRAFT_FLAGS, "--tokenizer-path")


def _looks_like_path(value: str) -> bool:
    return value.startswith(("/", "./", "../", "~")) or value in (".", "..")


def drop_unsafe(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without what could make replay read a user's files or run their code, the flags
    dropped): ``--config``, ``--trust-remote-code``, flags whose name says they take a path
    (``--*-path``, ``--*-dir``, ``--*-file`` ...) and flags given a path-like value. The model,
    tokenizer and draft paths are left for :func:`substitute_argv` to replace."""
    out: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name, inline, value = tok.partition("=")
        has_next = not inline and i + 1 < len(argv) and not argv[i + 1].startswith("--")
        nxt = argv[i + 1] if has_next else None
        if tok.startswith("--") and name not in _REPLACED and (
                name in ALWAYS_DROPPED or name.endswith(_PATH_SUFFIXES)
                or _looks_like_path(value if inline else (nxt or ""))):
            dropped.append(name)
            i += 1 if inline or nxt is None or name == "--trust-remote-code" else 2
            continue
        out.append(tok)
        i += 1
    return out, dropped


def substitute_argv(argv: list[str], model_arch: str | None, home: Path,
                    ) -> tuple[list[str] | None, str | None, list[str]]:
    """(argv as run, or None when replay must refuse; architecture used; notes).

    Replay never runs a user's path or code: the unsafe flags are dropped
    (:func:`drop_unsafe`), and the model path is always replaced by a generated
    folder holding the ``config.json`` of the architecture (given, or guessed
    from the model path by :func:`~service.engine.model_arch_for`). When the
    architecture is unknown, replay is refused (the last note says why). The
    speculative draft path, if any, gets a draft head matching the target
    (EAGLE3 head, EAGLE head for Llama targets, else a copy of the target
    config); a tokenizer path other than the model's is dropped.
    """
    out, dropped = drop_unsafe(list(argv))
    notes: list[str] = []
    if dropped:
        notes.append("dropped before replay (they name files or code of the user's): "
                     + ", ".join(dict.fromkeys(dropped)))
    idx, model, inline = _flag_value(out, _MODEL_FLAGS)
    arch = model_arch
    if arch is None and model is not None:
        arch = model_arch_for(model)
        if arch is not None:
            notes.append(f"architecture {arch} guessed from the model path {model}")
    if idx < 0:
        return out, arch, notes
    if arch is None or arch not in MODEL_CONFIGS:
        what = f"architecture {arch} has no generated config" if arch else \
            "the model architecture is unknown (give model_arch)"
        notes.append(f"replay refused: {what}; replay never runs a user's model folder")
        return None, arch, notes
    target = _stable_dir(home, arch, MODEL_CONFIGS[arch])
    _set_flag(out, idx, inline, str(target))
    notes.append(f"--model-path {model} replaced by a generated {arch} config folder {target}")
    t_idx, tokenizer, t_inline = _flag_value(out, ("--tokenizer-path",))
    if t_idx >= 0:
        _set_flag(out, t_idx, t_inline, str(target))
        notes.append("--tokenizer-path replaced by the generated folder as well")
    d_idx, draft, d_inline = _flag_value(out, _DRAFT_FLAGS)
    if d_idx >= 0 and draft is not None:
        if draft == model:
            _set_flag(out, d_idx, d_inline, str(target))
            notes.append("--speculative-draft-model-path (same as the model path) replaced too")
        else:
            _, algo, _ = _flag_value(out, ("--speculative-algorithm",))
            cfg = draft_config(arch, algo)
            label = f"draft-{cfg['architectures'][0]}-for-{arch}"
            draft_dir = _stable_dir(home, label, cfg)
            _set_flag(out, d_idx, d_inline, str(draft_dir))
            notes.append(f"--speculative-draft-model-path {draft} replaced by a generated "
                         f"{cfg['architectures'][0]} config folder {draft_dir}")
    return out, arch, notes
