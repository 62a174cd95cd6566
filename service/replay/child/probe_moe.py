"""The release's model config, quantization config and MoE layer, for a start-up probe (a
script of the sandbox, stdlib only plus the release and torch).

:func:`model_and_quant` builds ``ModelConfig.from_server_args`` on the generated model
folder, runs the release's ``check_quantized_moe_compatibility`` where it has one and
reads the quantization config; :func:`build_moe_layer` builds the MoE layer the model
would build, on the ``meta`` device (its quant method's ``create_weights`` and
``create_moe_runner``), and :func:`create_weights` calls the MoE method on a stand-in
layer when that layer cannot be built here. :func:`is_check_line` says whether a frame is
a check of the release (a ``raise``/``assert`` line outside its process-state
bookkeeping); :class:`ProbeUnreached` is a probe that did not reach its check. Imported
by bare name by ``probes.py`` inside the sandbox, and as ``service.replay.child.probe_moe``
by unit tests.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import traceback
import types
from typing import Any

try:  # run as a script in the sandbox: this folder is sys.path[0]
    from probe_state import positive_int
except ImportError:  # imported as service.replay.child.probe_moe (unit tests)
    from service.replay.child.probe_state import positive_int  # type: ignore[no-redef]

__all__ = [
    "ProbeUnreached",
    "build_moe_layer",
    "create_weights",
    "hf_text",
    "is_check_line",
    "model_and_quant",
    "moe_method",
    "moe_shape",
]


class ProbeUnreached(Exception):
    """The probe could not reach the family's check (answered ``harness_error``)."""


#: release files whose refusals mean the probe's stand-in process state is incomplete
#: (a rank or group that a launched server writes), never a check of the flags
_STATE_FILES = ("sglang/srt/runtime_context.py", "sglang/srt/distributed/parallel_state.py")


def is_check_line(frame: dict[str, Any] | None) -> bool:
    """Whether ``frame`` is a ``raise``/``assert`` line of the release outside its
    process-state bookkeeping (where a probe's refusal is a check's verdict)."""
    code = (frame or {}).get("code") or ""
    return (
        frame is not None
        and frame.get("kind") == "sglang"
        and frame.get("path") not in _STATE_FILES
        and (code.startswith(("raise ", "assert ", "assert(")) or code == "raise")
    )


def _model_config(server_args: Any) -> Any:
    from sglang.srt.configs.model_config import ModelConfig

    return ModelConfig.from_server_args(server_args)


def hf_text(mc: Any) -> Any:
    return getattr(mc, "hf_text_config", None) or mc.hf_config


def _check_compat(mc: Any, sizes: dict[str, int], out: dict[str, Any]) -> None:
    """The release's ``check_quantized_moe_compatibility``, where it has one."""
    try:
        from sglang.srt.model_executor.model_runner_components import moe_ep_setup
    except ImportError:
        moe_ep_setup = None  # type: ignore[assignment]
    check = getattr(moe_ep_setup, "check_quantized_moe_compatibility", None)
    if callable(check):
        out["steps"].append("moe_ep_setup.check_quantized_moe_compatibility")
        check(
            model_config=mc,
            tp_size=sizes["tp_size"],
            moe_ep_size=sizes["moe_ep_size"],
            moe_dp_size=sizes["moe_dp_size"],
        )
        return
    path = os.path.join(
        sys.modules["sglang"].__path__[0], "srt", "model_executor", "model_runner.py"
    )
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as fh:
        if "def check_quantized_moe_compatibility" not in fh.read():
            out["notes"].append("this release has no check_quantized_moe_compatibility")
            return
    from sglang.srt.model_executor.model_runner import ModelRunner

    out["steps"].append("ModelRunner.check_quantized_moe_compatibility")
    holder = types.SimpleNamespace(
        model_config=mc,
        tp_size=sizes["tp_size"],
        moe_ep_size=sizes["moe_ep_size"],
        moe_dp_size=sizes["moe_dp_size"],
    )
    ModelRunner.check_quantized_moe_compatibility(holder)  # type: ignore[arg-type]


def _quant_config(mc: Any) -> Any:
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader.weight_utils import get_quant_config

    params = inspect.signature(get_quant_config).parameters
    args: list[Any] = [mc, LoadConfig()]
    if "packed_modules_mapping" in params:
        args.append({})
    return get_quant_config(*args)


def moe_method(qc: Any) -> Any:
    """The quant config's MoE method class (``Fp8MoEMethod`` for ``Fp8Config``...)."""
    mod = sys.modules[type(qc).__module__]
    stem = type(qc).__name__.removesuffix("Config")
    named = getattr(mod, f"{stem}MoEMethod", None)
    if isinstance(named, type):
        return named
    for obj in vars(mod).values():
        if (
            isinstance(obj, type)
            and obj.__name__.endswith("MoEMethod")
            and obj.__module__ == mod.__name__
            and "create_weights" in vars(obj)
        ):
            return obj
    return None


def moe_shape(text: Any, fields: dict[str, Any]) -> tuple[int, int, int, int] | None:
    """(experts incl. redundant ones, hidden size, moe intermediate size, top-k) of the
    model's MoE layers, or None for a dense model."""
    inter = getattr(text, "moe_intermediate_size", None)
    experts = (
        getattr(text, "n_routed_experts", None)
        or getattr(text, "num_experts", None)
        or getattr(text, "num_local_experts", None)
    )
    if not inter or not experts:
        return None
    top_k = getattr(text, "num_experts_per_tok", None) or 1
    return (
        experts + positive_int(fields, "ep_num_redundant_experts", 0),
        text.hidden_size,
        inter,
        top_k,
    )


def model_and_quant(server_args: Any, out: dict[str, Any], check: bool) -> tuple[Any, Any]:
    """(ModelConfig, quant config or None), running the compatibility check if ``check``."""
    out["steps"].append("ModelConfig.from_server_args")
    mc = _model_config(server_args)
    quant = getattr(mc, "quantization", None)
    out["values"].update(
        quantization=quant,
        moe_intermediate_size=getattr(hf_text(mc), "moe_intermediate_size", None),
    )
    if check:
        _check_compat(mc, out["sizes"], out)
    if not quant:
        return mc, None
    out["steps"].append("get_quant_config")
    qc = _quant_config(mc)
    out["values"]["weight_block_size"] = getattr(qc, "weight_block_size", None)
    return mc, qc


def _layer_class(qc: Any) -> Any:
    """The MoE layer class the model would build (``get_moe_impl_class``), else FusedMoE."""
    try:
        from sglang.srt.layers.moe.ep_moe.layer import get_moe_impl_class
    except ImportError:
        get_moe_impl_class = None  # type: ignore[assignment]
    if callable(get_moe_impl_class):
        params = inspect.signature(get_moe_impl_class).parameters
        return get_moe_impl_class(qc) if params else get_moe_impl_class()
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    return FusedMoE


def build_moe_layer(qc: Any, shape: tuple[int, int, int, int], out: dict[str, Any]) -> str | None:
    """The release's MoE layer (``get_moe_impl_class``: FusedMoE, DeepEPMoE...) on the meta
    device: it sizes its partition from the faked parallel sizes, calls its quant method's
    ``create_weights`` and ``create_moe_runner`` (``MoeRunner``). None when built; else why
    not (an exception outside a check line). A check's refusal raises."""
    import torch

    experts, hidden, inter, top_k = shape
    cls = _layer_class(qc)
    params = inspect.signature(cls.__init__).parameters
    kwargs = {
        "num_experts": experts,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "layer_id": 0,
        "top_k": top_k,
        "params_dtype": torch.bfloat16,
        "quant_config": qc,
        "prefix": "model.layers.0.mlp.experts",
    }
    out["steps"].append(f"{cls.__name__}(...) on the meta device")
    try:
        with torch.device("meta"):
            layer = cls(**{k: v for k, v in kwargs.items() if k in params})
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        last = frames[-1] if frames else None
        if last is not None and is_check_line(
            {
                "kind": "sglang" if _release_rel(last.filename) else "other",
                "path": _release_rel(last.filename),
                "code": (last.line or "").strip(),
            }
        ):
            raise
        where = f"{os.path.basename(last.filename)}:{last.lineno}" if last else "?"
        return f"{type(exc).__name__} at {where}"
    method = getattr(layer, "quant_method", None)
    runner = getattr(method, "runner", None)
    out["values"].update(
        layer=cls.__name__,
        quant_method=type(method).__name__,
        intermediate_size_per_partition=getattr(layer, "intermediate_size_per_partition", None),
        num_local_experts=getattr(layer, "num_local_experts", None),
        runner_backend=getattr(getattr(runner, "runner_backend", None), "value", None),
        fused_func=getattr(getattr(runner, "fused_func", None), "__name__", None),
    )
    return None


def _release_rel(filename: str) -> str | None:
    """``sglang/...`` for a file of the release, else None."""
    root = os.path.dirname(sys.modules["sglang"].__path__[0])
    path = os.path.abspath(filename)
    if not path.startswith(root + os.sep):
        return None
    return os.path.relpath(path, root).replace(os.sep, "/")


def create_weights(
    method_cls: Any, qc: Any, experts: int, hidden: int, inter: int, top_k: int, out: dict[str, Any]
) -> None:
    """``create_weights`` of the MoE method on a stand-in layer holding what ``FusedMoE``
    sets before calling it (partition sizes from the faked parallel sizes)."""
    import torch
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig

    sizes = out["sizes"]
    per_partition = inter // sizes["moe_tp_size"]
    local = experts // sizes["moe_ep_size"]
    out["values"].update(intermediate_size_per_partition=per_partition, num_local_experts=local)
    layer = torch.nn.Module()
    fields = {
        f: v
        for f, v in {
            "num_experts": experts,
            "num_local_experts": local,
            "hidden_size": hidden,
            "intermediate_size_per_partition": per_partition,
            "layer_id": 0,
            "top_k": top_k,
            "params_dtype": torch.bfloat16,
        }.items()
        if f in getattr(MoeRunnerConfig, "__dataclass_fields__", {})
    }
    for name, value in {
        "moe_tp_size": sizes["moe_tp_size"],
        "moe_ep_size": sizes["moe_ep_size"],
        "moe_tp_rank": 0,
        "moe_ep_rank": 0,
        "num_experts": experts,
        "num_local_experts": local,
        "hidden_size": hidden,
        "intermediate_size_per_partition": per_partition,
        "moe_runner_config": MoeRunnerConfig(**fields),
    }.items():
        setattr(layer, name, value)
    out["steps"].append(f"{method_cls.__name__}.create_weights (stand-in layer)")
    method = method_cls(qc)
    params = inspect.signature(method.create_weights).parameters
    kwargs: dict[str, Any] = {
        "layer": layer,
        "num_experts": local,
        "hidden_size": hidden,
        "intermediate_size_per_partition": per_partition,
        "params_dtype": torch.bfloat16,
    }
    kwargs = {k: v for k, v in kwargs.items() if k in params or _has_var_kw(params)}
    with torch.device("meta"):
        method.create_weights(**kwargs, weight_loader=_no_loader)


def _has_var_kw(params: Any) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _no_loader(*_args: Any, **_kwargs: Any) -> None:
    """Stand-in weight loader: nothing is loaded in a probe."""
