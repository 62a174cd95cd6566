"""Everything the parent decides before a replay starts: machine, stubs, model folders, argv.

* :func:`hardware_payload` turns a declared :class:`HardwareProfile` into what
  the child's fakes answer (capability, memory in MiB, SM count, driver) and
  :func:`probe_values` into the values SGLang's probes are pinned to; both
  follow :mod:`service.engine.facts.core` so replay and the static engine
  agree on what "rtx-pro-6000-x8" means.
* :func:`stub_plan` says which modules are stubbed: *force* (GPU-only, stubbed
  even when installed) per vendor, *fallback* (only when missing here).
* :func:`substitute_argv` reads the user's command line as the release's parser does
  (:mod:`service.replay.argv_guard`), drops what names files or code, and swaps the
  ``--model-path`` (and a speculative draft path) for generated config-only folders.
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
from service.replay.argv_guard import Item, OptionTable, expand, path_like
from service.replay.model_configs import MODEL_CONFIGS, draft_config, write_config_dir

__all__ = [
    "ALWAYS_DROPPED", "FALLBACK_OPTIONS", "FALLBACK_STUBS", "FORCE_STUBS", "UNSAFE_DESTS", "drop_unsafe",
    "generated_paths", "hardware_payload", "probe_values", "readable_by_all", "stable_dir", "stub_plan",
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
    "nvidia": (
        "triton",
        "flashinfer",
        "sgl_kernel",
        "deep_gemm",
        "cuda",
        "pynvml",
        "tvm_ffi",
        "cutlass",
        "cuda_python",
    ),
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
    "psutil",
    "msgspec",
    "zmq",
    "IPython",
    "partial_json_parser",
    "torchvision",
    "dill",
    "sentencepiece",
    "compressed_tensors",
    "gguf",
    "tvm_ffi",
    "xgrammar",
    "einops",
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


def readable_by_all(folder: Path) -> None:
    """Modes 0755 (folder) and 0644 (its files): the sandbox user (host uid 65534 when the
    service is root) reads generated folders; ``mkdtemp`` makes them 0700."""
    os.chmod(folder, 0o755)
    for child in folder.iterdir():
        if child.is_file() and not child.is_symlink():
            os.chmod(child, 0o644)


def stable_dir(home: Path, label: str, config: dict[str, Any]) -> Path:
    """A config-only model folder named by its content, written once (atomically), readable
    by the sandbox user."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    dest = home / "replay-models" / f"{label}-{digest}"
    if (dest / "config.json").is_file():
        if dest.stat().st_mode & 0o005 != 0o005:  # written by an older harness
            readable_by_all(dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(dest.parent, 0o755)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    write_config_dir(tmp, config)
    readable_by_all(tmp)
    try:
        os.replace(tmp, dest)
    except OSError:  # another replay wrote it first
        for child in tmp.iterdir():
            child.unlink()
        tmp.rmdir()
    return dest


#: Destinations replay always drops: they make SGLang read a file or run a folder's code.
UNSAFE_DESTS = ("config", "trust_remote_code")
#: (kept for callers) the spellings of :data:`UNSAFE_DESTS`
ALWAYS_DROPPED = ("--config", "--trust-remote-code")
_PATH_SUFFIXES = ("-path", "-paths", "-dir", "-file", "-folder")
_DEST_SUFFIXES = ("_path", "_paths", "_dir", "_file", "_folder")
_MODEL_DEST, _TOKENIZER_DEST, _DRAFT_DEST = (
    "model_path",
    "tokenizer_path",
    "speculative_draft_model_path",
)
_REPLACED_DESTS = (_MODEL_DEST, _TOKENIZER_DEST, _DRAFT_DEST)

#: used when the release's own table is not known (unit tests, a release whose parser could
#: not be read): the options that matter here, so that their prefixes resolve to them (or
#: are refused as ambiguous); anything else is left for the child's real-parser check
FALLBACK_OPTIONS = OptionTable(
    {
        "--model-path": ("model_path", "1"),
        "--model": ("model_path", "1"),
        "--tokenizer-path": ("tokenizer_path", "1"),
        "--speculative-draft-model-path": ("speculative_draft_model_path", "1"),
        "--speculative-draft-model": ("speculative_draft_model_path", "1"),
        "--speculative-algorithm": ("speculative_algorithm", "1"),
        "--trust-remote-code": ("trust_remote_code", "0"),
        "--config": ("config", "1"),
    },
    source="fallback",
)


def _unsafe(item: Item) -> bool:
    """Whether an expanded option must be dropped (model paths are substituted instead)."""
    if item.dest in _REPLACED_DESTS:
        return False
    if item.dest in UNSAFE_DESTS:
        return True
    if item.option is not None and (
        item.option.endswith(_PATH_SUFFIXES) or (item.dest or "").endswith(_DEST_SUFFIXES)
    ):
        return True
    return any(path_like(v) for v in item.values)


def drop_unsafe(
    argv: list[str],
    options: OptionTable | None = None,
) -> tuple[list[str], list[str]]:
    """(argv expanded by the release's parser rules (:func:`~service.replay.argv_guard.expand`:
    abbreviations and ``--flag=value`` resolved to the full option) without what could make
    replay read a user's files or run their code, the options dropped): ``--config``,
    ``--trust-remote-code``, options whose name says they take a path (``--*-path``,
    ``--*-dir``, ``--*-file`` ...), options given a path-like value
    (:func:`~service.replay.argv_guard.path_like`) and stray path-like values. The model,
    tokenizer and draft paths are left for :func:`substitute_argv`. Raises ``ValueError``
    for an ambiguous option."""
    out: list[str] = []
    dropped: list[str] = []
    unknown_before = False  # the previous token was an option the table does not know
    for item in expand(list(argv), options or FALLBACK_OPTIONS):
        if item.option is None:
            is_option = item.token.startswith("-") and not item.token[1:2].isdigit()
            name, eq, value = item.token.partition("=")
            if is_option and eq:  # an unknown --opt=value
                if path_like(value) or name.endswith(_PATH_SUFFIXES):
                    dropped.append(name)
                    unknown_before = False
                    continue
            elif path_like(item.token):
                if unknown_before:  # its value, as far as anyone can tell: drop both
                    dropped.append(out.pop())
                else:
                    dropped.append("a path-like value")
                unknown_before = False
                continue
            unknown_before = is_option and not eq
        elif _unsafe(item):
            dropped.append(item.option)
            continue
        else:
            unknown_before = False
        out += item.tokens()
    return out, dropped


def _last(items: list[Item], dest: str) -> str | None:
    values = [it.values[-1] for it in items if it.dest == dest and it.values]
    return values[-1] if values else None


def generated_paths(argv: list[str], home: Path) -> list[str]:
    """The generated model folders named in an argv as run (the child accepts only these)."""
    root = str(home / "replay-models") + os.sep
    out = []
    for token in argv:
        value = token.split("=", 1)[1] if token.startswith("-") and "=" in token else token
        if value.startswith(root):
            out.append(value)
    return out


def substitute_argv(
    argv: list[str],
    model_arch: str | None,
    home: Path,
    options: OptionTable | None = None,
) -> tuple[list[str] | None, str | None, list[str]]:
    """(argv as run, or None when replay must refuse; architecture used; notes).

    Replay never runs a user's path or code. ``argv`` is read with the release's option
    table ``options`` (:mod:`service.replay.options`; :data:`FALLBACK_OPTIONS` when None)
    as its argparse would: abbreviations, ``--flag=value`` and repeated flags resolve to
    the option they mean, and an ambiguous one refuses the replay. The unsafe options are
    dropped (:func:`drop_unsafe`), every model, tokenizer and draft path given is removed,
    and one ``--model-path`` naming a generated folder holding the ``config.json`` of the
    architecture (given, or guessed from the last model path by
    :func:`~service.engine.model_arch_for`) is added, also when the command gave none
    (unless the release requires one: then argparse refuses it, as SGLang would). When the
    architecture is unknown, replay is refused (the last note says why). A speculative
    draft path, if given, becomes a draft head matching the target (EAGLE3 head, EAGLE head
    for Llama targets, else a copy of the target config); a tokenizer path becomes the
    generated model folder.
    """
    table = options or FALLBACK_OPTIONS
    notes: list[str] = []
    try:
        items = expand(list(argv), table)
        out, dropped = drop_unsafe(list(argv), table)
    except ValueError as exc:
        notes.append(
            f"replay refused: {exc} (argparse would refuse it; replay runs only "
            "command lines whose every option it can resolve)"
        )
        return None, model_arch, notes
    if dropped:
        notes.append(
            "dropped before replay (they name files or code of the user's): "
            + ", ".join(dict.fromkeys(dropped))
        )
    model, tokenizer, draft = (_last(items, d) for d in _REPLACED_DESTS)
    algo = _last(items, "speculative_algorithm")
    kept = [it for it in expand(out, table) if it.dest not in _REPLACED_DESTS]
    out = [tok for it in kept for tok in it.tokens()]
    arch = model_arch
    if arch is None and model is not None:
        arch = model_arch_for(model)
        if arch is not None:
            notes.append(f"architecture {arch} guessed from the model path {model}")
    if model is None and _MODEL_DEST in table.required:
        return out, arch, notes  # argparse refuses it ("required"), before any folder is read
    if arch is None or arch not in MODEL_CONFIGS:
        what = (
            f"architecture {arch} has no generated config"
            if arch
            else "the model architecture is unknown (give model_arch)"
        )
        notes.append(f"replay refused: {what}; replay never runs a user's model folder")
        return None, arch, notes
    target = stable_dir(home, arch, MODEL_CONFIGS[arch])
    out += [table.spelling(_MODEL_DEST, "--model-path") or "--model-path", str(target)]
    notes.append(
        f"--model-path {model if model is not None else '(not given)'} replaced by "
        f"a generated {arch} config folder {target}"
    )
    if tokenizer is not None:
        out += [
            table.spelling(_TOKENIZER_DEST, "--tokenizer-path") or "--tokenizer-path",
            str(target),
        ]
        notes.append("--tokenizer-path replaced by the generated folder as well")
    if draft is not None:
        flag = (
            table.spelling(_DRAFT_DEST, "--speculative-draft-model-path")
            or "--speculative-draft-model-path"
        )
        if draft == model:
            out += [flag, str(target)]
            notes.append("--speculative-draft-model-path (same as the model path) replaced too")
        else:
            cfg = draft_config(arch, algo)
            label = f"draft-{cfg['architectures'][0]}-for-{arch}"
            draft_dir = stable_dir(home, label, cfg)
            out += [flag, str(draft_dir)]
            notes.append(
                f"--speculative-draft-model-path {draft} replaced by a generated "
                f"{cfg['architectures'][0]} config folder {draft_dir}"
            )
    return out, arch, notes
