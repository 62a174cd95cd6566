"""Declared hardware and model facts, spelled the way SGLang's conditions ask for them.

SGLang's validation reads the machine through zero-argument probes
(``is_sm100_supported()``, ``is_hip()``, ``get_device_sm()`` in 0.5.9–0.5.11;
``get_platform().is_sm100`` in 0.5.23's ``arg_groups``), the model through
``hf_config.architectures[0]`` and the environment through
``get_bool_env_var("X")`` or ``envs.X.get()``. None of these can be probed
here, so they are *declared*: a :class:`HardwareProfile` (``--hardware
rtx-pro-6000-x8``, or one built from the GPUs a log mentions), a model
architecture (given, or guessed from the model path by :data:`ARCH_BY_MODEL`)
and the environment variables found in the log.

:func:`fact_values` turns them into :class:`~service.engine.expr.interpreter.Value`
objects keyed exactly as :func:`~service.engine.expr.interpreter.fact_key` spells
the expressions, each with a ``fact`` provenance that names where it came
from. The probe semantics follow ``sglang/srt/utils/common.py``
(``_check_cuda_device_version``): ``is_sm100_supported()`` is "CUDA build,
compute-capability major 10, CUDA >= 12.8"; ``is_blackwell_supported()`` is
"major 10, 11 or 12, CUDA >= 12.8"; ``is_sm90_supported()`` and
``is_hopper_with_cuda_12_3()`` are "major 9, CUDA >= 12.3".
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel

from kb.hardware import (
    AMD_CAPABILITY,
    CUDA,
    GPU_NAME_BASES,
    PROFILES,
    HardwareProfile,
    get_profile,
    make_profile,
)
from service.engine.expr.interpreter import Provenance, Value
from service.engine.expr.values import FactsView
from service.engine.logparse.environment import GpuHint, gpu_sm

__all__ = [
    "ARCH_BY_MODEL", "PROFILES", "EnvField", "HardwareProfile", "env_fields_from_source",
    "fact_values", "get_profile", "hardware_facts", "model_arch_for", "model_facts",
    "env_facts", "probe_values", "profile_from_gpus",
]  # fmt: skip


def profile_from_gpus(gpus: list[GpuHint]) -> HardwareProfile | None:
    """A profile from the GPUs a log mentions (the first one that can be identified).

    A known GPU name gives its base profile with the logged count and memory;
    an unknown NVIDIA name with a known compute capability gives a generic
    ``gpu-smNN-xN`` profile. None when no GPU can be identified.
    """
    for hint in gpus:
        base = next((b for rx, b in GPU_NAME_BASES if rx.search(hint.name)), None)
        count = hint.count or 1
        if base is not None:
            prof = make_profile(base, count)
            update: dict[str, object] = {"gpu": hint.name}
            if hint.memory_gb:
                update["memory_gb"] = hint.memory_gb
            if hint.sm and prof.vendor == "nvidia":
                update["sm"] = hint.sm
            return prof.model_copy(update=update)
        sm = hint.sm or gpu_sm(hint.name)
        if sm:
            return HardwareProfile(
                name=f"gpu-sm{sm}-x{count}",
                gpu=hint.name,
                vendor="nvidia",
                sm=sm,
                count=count,
                memory_gb=hint.memory_gb or 0,
                cuda=CUDA,
            )
    return None


# ------------------------------------------------------------------------ model names

# (case-insensitive regex searched in the model path or name, HF architecture); first match
# wins, so specific names come before their families. Names are those SGLang's sources use.
ARCH_BY_MODEL: list[tuple[str, str]] = [
    (r"kimi[-_ ]?k2[._-]?[56]\b", "KimiK25ForConditionalGeneration"),
    (r"kimi[-_ ]?linear", "KimiLinearForCausalLM"),
    (r"kimi[-_ ]?vl", "KimiVLForConditionalGeneration"),
    (r"kimi[-_ ]?k2", "DeepseekV3ForCausalLM"),
    (r"deepseek[-_ ]?r1[-_ ]?distill[-_ ]?qwen", "Qwen2ForCausalLM"),
    (r"deepseek[-_ ]?r1[-_ ]?distill[-_ ]?llama", "LlamaForCausalLM"),
    (r"deepseek[-_ ]?v4", "DeepseekV4ForCausalLM"),
    (r"deepseek[-_ ]?v3[._]2", "DeepseekV32ForCausalLM"),
    (r"deepseek[-_ ]?(?:v3|r1)", "DeepseekV3ForCausalLM"),
    (r"deepseek[-_ ]?v2", "DeepseekV2ForCausalLM"),
    (r"llama[-_ ]?4", "Llama4ForConditionalGeneration"),
    (r"llama[-_ ]?[23]|eagle3?[-_ ]?llama", "LlamaForCausalLM"),
    (r"qwen3[._-]?5.{0,250}[-_]a\d+(?:\.\d+)?b", "Qwen3_5MoeForConditionalGeneration"),
    (r"qwen3[._-]?5", "Qwen3_5ForConditionalGeneration"),
    (r"qwen3[-_ ]?next", "Qwen3NextForCausalLM"),
    (r"qwen3[-_ ]?vl.{0,250}[-_]a\d+(?:\.\d+)?b", "Qwen3VLMoeForConditionalGeneration"),
    (r"qwen3[-_ ]?vl", "Qwen3VLForConditionalGeneration"),
    (r"qwen3[-_ ]?omni", "Qwen3OmniMoeForConditionalGeneration"),
    (r"qwen3.{0,250}[-_]a\d+(?:\.\d+)?b", "Qwen3MoeForCausalLM"),
    (r"qwen3", "Qwen3ForCausalLM"),
    (r"qwen2[._-]?5[-_ ]?vl", "Qwen2_5_VLForConditionalGeneration"),
    (r"qwen2.{0,250}[-_]a\d+(?:\.\d+)?b|qwen1[._-]5[-_]moe", "Qwen2MoeForCausalLM"),
    (r"qwen2|qwq", "Qwen2ForCausalLM"),
    (r"gpt[-_ ]?oss", "GptOssForCausalLM"),
    (r"glm[-_ ]?5", "GlmMoeDsaForCausalLM"),
    (r"glm[-_ ]?4[._-]?[5-7]v", "Glm4vMoeForConditionalGeneration"),
    (r"glm[-_ ]?4[._-]?7[-_ ]?flash", "Glm4MoeLiteForCausalLM"),
    (r"glm[-_ ]?4[._-]?[5-7]", "Glm4MoeForCausalLM"),
    (r"mistral[-_ ]?large[-_ ]?3", "MistralLarge3ForCausalLM"),
    (r"mixtral", "MixtralForCausalLM"),
    (r"mistral", "MistralForCausalLM"),
    (r"gemma[-_ ]?3n", "Gemma3nForConditionalGeneration"),
    (r"gemma[-_ ]?3[-_ ]?(?:1b|270m)", "Gemma3ForCausalLM"),
    (r"gemma[-_ ]?3", "Gemma3ForConditionalGeneration"),
    (r"gemma[-_ ]?4", "Gemma4ForConditionalGeneration"),
    (r"minimax[-_ ]?m2", "MiniMaxM2ForCausalLM"),
]
_ARCH_RES = [(re.compile(p, re.I), arch) for p, arch in ARCH_BY_MODEL]
#: Characters of a model path component the name patterns look at (hub names have <= 96);
#: with it, ``.{0,250}`` in the patterns is ``.*``, and each search is linear (issue 26).
_MAX_NAME_CHARS = 256


def model_arch_for(model: str | None) -> str | None:
    """The HF architecture SGLang would read for ``model`` (a path or hub name), or None.

    Path components are tried from the last one back (``/models/Kimi-K2.6`` ->
    ``Kimi-K2.6``; a Hugging Face cache path ``.../models--org--Name/snapshots/<sha>``
    finds ``Name``); within a component the first pattern of :data:`ARCH_BY_MODEL`
    that matches wins. This is a guess from the name; the model's ``config.json``
    is authoritative. Kimi K2.5/K2.6 are ``KimiK25ForConditionalGeneration`` (a
    DeepSeek-V3-style text model wrapped with the MoonViT vision tower); Kimi K2
    and K2-Thinking are plain ``DeepseekV3ForCausalLM``.
    """
    if not model or not model.strip():
        return None
    parts = [p for p in model.strip().replace("\\", "/").split("/") if p]
    for part in reversed(parts[-6:]):
        part = part[:_MAX_NAME_CHARS]
        for rx, arch in _ARCH_RES:
            if rx.search(part):
                return arch
    return None


# ------------------------------------------------------------------------- fact values

_PROBES_CUDA = {  # probe -> (compute-capability majors, minimum CUDA)
    "is_sm90_supported": ((9,), (12, 3)),
    "is_hopper_with_cuda_12_3": ((9,), (12, 3)),
    "is_ampere_with_cuda_12_3": ((8,), (12, 3)),
    "is_sm80_supported": ((8,), (11, 0)),
    "is_sm100_supported": ((10,), (12, 8)),
    "is_sm100_or_sm110_supported": ((10, 11), (12, 8)),
    "is_sm110_supported": ((11,), (12, 8)),
    "is_sm120_supported": ((12,), (12, 8)),
    "is_blackwell_supported": ((10, 11, 12), (12, 8)),
    "is_blackwell": ((10, 11, 12), (12, 8)),
}
# 0.5.23's get_platform() facts -> the utils.common probe behind each (runtime_context.py)
_PLATFORM = {
    "is_cuda": "is_cuda", "is_hip": "is_hip", "is_npu": "is_npu", "is_xpu": "is_xpu",
    "is_musa": "is_musa", "is_mps": "is_mps", "is_sm90": "is_sm90_supported",
    "is_sm100": "is_sm100_supported", "is_sm100_or_sm110": "is_sm100_or_sm110_supported",
    "is_sm110": "is_sm110_supported", "is_sm120": "is_sm120_supported",
    "is_blackwell": "is_blackwell_supported",
    "is_hopper_with_cuda_12_3": "is_hopper_with_cuda_12_3",
    "has_flashinfer": "is_flashinfer_available", "device_sm": "get_device_sm",
    "device_capability": "get_device_capability",
}  # fmt: skip
_CURRENT_PLATFORM = (
    "is_cuda",
    "is_hip",
    "is_npu",
    "is_xpu",
    "is_musa",
    "is_mps",
    "is_cpu",
    "is_cuda_alike",
)


def _cuda_tuple(cuda: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", cuda or "")
    return (int(m[1]), int(m[2])) if m else None


def probe_values(hw: HardwareProfile, flashinfer_env: bool) -> dict[str, object]:
    """Values of the zero-argument probes (by function name) on ``hw``."""
    nvidia, amd, cpu = hw.vendor == "nvidia", hw.vendor == "amd", hw.vendor == "cpu"
    cuda = _cuda_tuple(hw.cuda) if nvidia else None
    cap: tuple[int, int] | None = None
    if nvidia and hw.sm is not None:
        cap = (hw.sm // 10, hw.sm % 10)
    elif amd:
        cap = AMD_CAPABILITY.get(hw.name.rpartition("-x")[0] or hw.name)
    v: dict[str, object] = {
        "is_cuda": nvidia, "is_hip": amd, "is_cuda_alike": nvidia or amd, "is_npu": False,
        "is_xpu": False, "is_hpu": False, "is_musa": False, "is_mps": False, "is_cpu": cpu,
        "is_flashinfer_available": nvidia and flashinfer_env, "is_gfx95_supported": amd and cap == (9, 5),
        "is_sm120": nvidia and hw.sm == 120, "is_sm121": nvidia and hw.sm == 121,
    }  # fmt: skip
    for probe, (majors, need) in _PROBES_CUDA.items():
        if nvidia and (cap is None or cuda is None):
            continue  # unknown capability or CUDA: leave the probe unknown
        v[probe] = bool(nvidia and cap and cuda and cap[0] in majors and cuda >= need)
    if cap is not None:
        v["get_device_sm"] = cap[0] * 10 + cap[1]
        v["get_device_capability"] = cap
    elif cpu:
        v["get_device_sm"] = 0
    return v


def hardware_facts(
    hw: HardwareProfile, env: Mapping[str, str] | None = None, *, origin: str | None = None
) -> dict[str, Value]:
    """Facts about the machine, keyed as :func:`~service.engine.expr.interpreter.fact_key` spells them.

    ``is_flashinfer_available()`` assumes flashinfer is installed (SGLang's CUDA
    install ships it) unless ``env`` sets ``SGLANG_IS_FLASHINFER_AVAILABLE`` false.
    ``origin`` is the log line the profile was read from, when it was (each fact's
    provenance then says "printed in the log" and quotes it).
    """
    label = f"sm{hw.sm}" if hw.sm is not None else hw.vendor
    if origin is not None:
        label += f", printed in the log: {origin[:120]}"
    prov = Provenance("fact", f"hardware profile {hw.name} ({label})")
    flag = (env or {}).get("SGLANG_IS_FLASHINFER_AVAILABLE")
    flashinfer_env = flag is None or flag.lower() in ("true", "1")
    assumed = Provenance(
        "fact",
        (
            f"hardware profile {hw.name} ({label}); assumes flashinfer is installed, as SGLang's "
            "CUDA install does"
            if flag is None
            else f"hardware profile {hw.name} ({label}) and SGLANG_IS_FLASHINFER_AVAILABLE={flag}"
        ),
    )
    probes = probe_values(hw, flashinfer_env)
    out: dict[str, Value] = {}
    for name, value in probes.items():
        out[f"{name}()"] = Value(value, assumed if name == "is_flashinfer_available" else prov)
    gpu = hw.vendor != "cpu"
    cap = probes.get("get_device_capability")
    extra: dict[str, object] = {
        "torch.cuda.is_available()": gpu,
        "torch.cuda.device_count()": hw.count if gpu else 0,
        "torch.version.cuda": hw.cuda if hw.vendor == "nvidia" else None,
        "torch.xpu.is_available()": False, "torch.npu.is_available()": False,
        "torch.hpu.is_available()": False,
        "current_platform.is_out_of_tree()": False,
    }  # fmt: skip
    if cap is not None:
        extra["torch.cuda.get_device_capability()"] = cap
    if hw.vendor == "amd":
        extra["torch.version.hip"] = True  # a ROCm build; the exact version is not declared
    elif hw.vendor == "nvidia":
        extra["torch.version.hip"] = None
    for name in _CURRENT_PLATFORM:
        if name in probes:
            extra[f"current_platform.{name}()"] = probes[name]
    if hw.memory_gb and gpu:
        mib = hw.memory_gb * 1024
        for key in (
            "gpu_mem",
            "get_device_memory_capacity()",
            "get_device_memory_capacity(args.device)",
        ):
            out[key] = Value(
                mib,
                Provenance(
                    "fact", f"hardware profile {hw.name}: {hw.memory_gb} GB per GPU (~{mib} MiB)"
                ),
            )
    for key, value in extra.items():
        out[key] = Value(value, prov)
    # 0.5.23: get_platform().X reads the same probes (runtime_context._PLATFORM_PROBES)
    platform = {k: probes[p] for k, p in _PLATFORM.items() if p in probes}
    # the object itself: each attribute read is the fact below, so a memo keyed on the
    # facts read does not depend on probes the reader never used
    view = Provenance("fact", "the platform object; each attribute read is a fact below")
    out["get_platform()"] = Value(FactsView("get_platform()"), view)
    for k, value in platform.items():
        p = assumed if k == "has_flashinfer" else prov
        for root in ("get_platform()", "platform"):
            out[f"{root}.{k}"] = Value(value, p)
    return out


def model_facts(model_arch: str, model: str | None = None) -> dict[str, Value]:
    """``model_arch`` and the ``hf_config.architectures`` chains SGLang reads it from.

    The provenance says the architecture was guessed from the model's name but does not
    quote the name: facts equal for two paths of one model keep rule-card verdicts
    reusable across paths (:mod:`~service.engine.rules.value_classes`)."""
    guessed = model is not None and model_arch_for(model) == model_arch
    detail = (
        f"model architecture {model_arch} (guessed from the model's name)"
        if guessed
        else f"model architecture {model_arch} (declared)"
    )
    prov = Provenance("fact", detail)
    archs = [model_arch]
    return {
        "model_arch": Value(model_arch, prov),
        "get_model_config().hf_config.architectures": Value(archs, prov),
        "model_config.hf_config.architectures": Value(archs, prov),
        "hf_config.architectures": Value(archs, prov),
        "model_config_of(args)": Value({"hf_config": {"architectures": archs}}, prov),
    }


# --------------------------------------------------------------------------- environment

EnvKind = Literal["bool", "int", "float", "str", "tuple", "json"]


class EnvField(BaseModel):
    """An ``envs.X`` declaration in ``sglang/srt/environ.py``: its parser and default."""

    kind: EnvKind
    default: object = None
    default_known: bool = False


_ENV_CLASSES: dict[str, EnvKind] = {
    "EnvBool": "bool", "EnvInt": "int", "EnvFloat": "float", "EnvStr": "str",
    "EnvTuple": "tuple", "EnvJSON": "json", "EnvBoolWithAlias": "bool",
    "EnvIntWithAlias": "int", "EnvStrWithAlias": "str",
}  # fmt: skip


def env_fields_from_source(text: str) -> dict[str, EnvField]:
    """``{name: EnvField}`` for every ``NAME = EnvBool(default)``-style line of ``environ.py``.

    The file is parsed with :mod:`ast` (never imported); defaults are read with
    :func:`ast.literal_eval` and marked unknown when they are not literals.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: dict[str, EnvField] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in _ENV_CLASSES
        ):
            continue
        kind = _ENV_CLASSES[node.value.func.id]
        default: object = None
        known = not node.value.args
        if node.value.args:
            try:
                default = ast.literal_eval(node.value.args[0])
                known = True
            except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
                known = False
        out[node.targets[0].id] = EnvField(kind=kind, default=default, default_known=known)
    return out


def _parse_env(kind: EnvKind | None, raw: str) -> tuple[bool, object]:
    """(ok, value) as ``envs.X.get()`` would parse ``raw`` (kind None: guess from the text)."""
    low = raw.strip().lower()
    if kind == "bool" or (kind is None and low in ("true", "false", "yes", "no", "y", "n")):
        if low in ("true", "1", "yes", "y"):
            return True, True
        if low in ("false", "0", "no", "n"):
            return True, False
        return False, None
    if kind in ("int", None) and re.fullmatch(r"[+-]?\d{1,18}", raw.strip()):
        return True, int(raw)
    if kind == "int":
        return False, None
    if kind == "float" or (kind is None and re.fullmatch(r"[+-]?\d+\.\d*(?:e[+-]?\d+)?", low)):
        try:
            return True, float(raw)
        except ValueError:
            return False, None
    if kind == "tuple":
        return True, tuple(s.strip() for s in raw.split(",") if s.strip())
    if kind == "json":
        return False, None  # not evaluated here
    return True, raw


def env_facts(
    env: Mapping[str, str], env_fields: Mapping[str, EnvField] | None = None
) -> dict[str, Value]:
    """Facts for environment variables: set ones from ``env``; unset ``envs.X`` from defaults.

    A set variable ``X`` answers ``get_bool_env_var('X')`` (with or without a
    default argument; ``"true"``/``"1"`` are true, as in SGLang),
    ``get_int_env_var('X')``, ``os.getenv('X')``, ``os.environ.get('X')``,
    ``envs.X.get()`` (parsed by the declared type when ``env_fields`` is given,
    else guessed from the text) and ``envs.X.is_set()``. With ``env_fields``,
    every declared variable missing from ``env`` answers ``envs.X.get()`` with
    its default and ``envs.X.is_set()`` with False, marked as defaults.
    """
    out: dict[str, Value] = {}
    for name, raw in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            continue
        prov = Provenance("fact", f"environment {name}={raw} (from the log)")
        q = repr(name)
        low = raw.lower()
        as_bool = low in ("true", "1")
        for default in ("", ", 'false'", ", 'true'", ", default='false'", ", default='true'"):
            out[f"get_bool_env_var({q}{default})"] = Value(as_bool, prov)
        for getter in ("os.getenv", "os.environ.get"):
            out[f"{getter}({q})"] = Value(raw, prov)
        if raw.strip() and re.fullmatch(r"[+-]?\d{1,18}", raw.strip()):
            out[f"get_int_env_var({q})"] = Value(int(raw), prov)
        out[f"envs.{name}.is_set()"] = Value(True, prov)
        field = (env_fields or {}).get(name)
        ok, value = _parse_env(field.kind if field else None, raw)
        if ok:
            out[f"envs.{name}.get()"] = Value(value, prov)
        elif field is not None and field.default_known and field.kind != "json":
            out[f"envs.{name}.get()"] = Value(
                field.default,
                Provenance(
                    "fact",
                    f"environment {name}={raw} (from the log) is not a valid {field.kind}; "
                    "SGLang warns and uses the default",
                ),
            )
    for name, field in (env_fields or {}).items():
        if name in env or not field.default_known or field.kind == "json":
            continue
        prov = Provenance("default", f"{name} not set in the log; default in environ.py")
        value = tuple(field.default) if isinstance(field.default, list) else field.default
        out[f"envs.{name}.get()"] = Value(value, prov)
        out[f"envs.{name}.is_set()"] = Value(False, prov)
    return out


def fact_values(
    hw: HardwareProfile | None,
    model_arch: str | None,
    env: Mapping[str, str] | None = None,
    *,
    model: str | None = None,
    env_fields: Mapping[str, EnvField] | None = None,
    hw_origin: str | None = None,
) -> dict[str, Value]:
    """Every declared fact for the evaluator's ``Env(attrs, facts=...)``.

    ``hw`` gives the hardware probes (see :func:`hardware_facts`), ``model_arch``
    the architecture chains (``model`` only improves the provenance text; ``hw_origin``
    is the log line ``hw`` was read from, see :func:`hardware_facts`),
    ``env`` the environment variables seen in the log (see :func:`env_facts`).
    Anything not declared is simply absent, so the evaluator reports it as unknown.
    """
    out: dict[str, Value] = {}
    if hw is not None:
        out.update(hardware_facts(hw, env, origin=hw_origin))
    if model_arch:
        out.update(model_facts(model_arch, model))
    if env or env_fields:
        out.update(env_facts(env or {}, env_fields))
    return out
