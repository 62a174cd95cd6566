"""Start-up probes: the release's own code past argument validation, in the replay child.

A script of the sandbox like ``child.py`` (stdlib only plus the release, torch and the
stubs; never ``sglang_triage``). After a command line passed validation
(``prepare_server_args`` and, 0.5.19+, ``resolve_once``), a job that asks for a probe
(``{"family": ..., ...}``, see :mod:`service.replay.probes`) runs, in the same fork, the
code SGLang's model runner would run next for that family, on CPU torch:

* the distributed sizes are faked: ``get_tensor_model_parallel_world_size``,
  ``get_moe_expert_parallel_world_size``, ``get_moe_tensor_parallel_world_size`` (and the
  ranks, 0) answer what the resolved server args give (``tp_size``, ``ep_size``,
  ``moe_dp_size``; moe_tp = tp / ep / moe_dp), in ``parallel_state`` and in every
  ``sglang.*`` module that imported them by name;
* ``moe_block_shape``: the release's ``ModelConfig.from_server_args`` on the generated
  model folder, its ``check_quantized_moe_compatibility`` (the ``moe_ep_setup`` function,
  0.5.16+; the ``ModelRunner`` method, 0.5.9-0.5.11, called on a stand-in holding the
  fields it reads), the quantization config (``get_quant_config``) and the MoE layer,
  whose quant method's ``create_weights`` runs on the ``meta`` device (nothing is
  allocated). The layer is the class the model would build (``get_moe_impl_class``: ``FusedMoE``,
  ``DeepEPMoE``...); when it cannot be built here (a process group it needs), the MoE
  method's ``create_weights`` runs on a stand-in layer holding the partition sizes;
* ``moe_runner_a2a``: the server args published (``set_global_server_args_for_scheduler``),
  ``initialize_moe_config``, every module of the release that registers a fused MoE
  function (``@register_fused_func``) imported, the model config and compatibility check
  as above, then the MoE layer, whose quant method constructs ``MoeRunner`` with the
  backend it picks (the fused-func lookup); a layer that cannot be built here is
  ``harness_error``. With ``runner_backend`` given: ``MoeRunner(backend, MoeRunnerConfig())``
  directly.

The outcome has the shape of a validation outcome: ``passed``, ``raised`` (the innermost
frame is an SGLang ``raise``/``assert`` line: the check itself refused) or
``harness_error`` with phase ``probe`` (anything else: the probe did not reach a check).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

__all__ = ["FAMILIES", "fake_parallel", "parallel_sizes", "run_probe"]

#: what a probe family runs (for reports)
FAMILIES = ("moe_block_shape", "moe_runner_a2a")

_RANK = (
    "get_tensor_model_parallel_rank",
    "get_moe_expert_parallel_rank",
    "get_moe_tensor_parallel_rank",
    "get_moe_data_parallel_rank",
)
_REGISTERS = re.compile(r"@register_fused_func\(\s{0,4}\"(\w{1,40})\",\s{0,4}\"(\w{1,60})\"")


def _int(fields: dict[str, Any], name: str, default: int) -> int:
    value = fields.get(name)
    return value if isinstance(value, int) and value > 0 else default


def parallel_sizes(fields: dict[str, Any]) -> dict[str, int]:
    """The sizes a rank of this launch would see, from the resolved server-args fields."""
    tp = _int(fields, "tp_size", 1)
    ep = _int(fields, "ep_size", _int(fields, "moe_ep_size", 1))
    moe_dp = _int(fields, "moe_dp_size", 1)
    return {
        "tp_size": tp,
        "moe_ep_size": ep,
        "moe_dp_size": moe_dp,
        "moe_tp_size": max(1, tp // ep // moe_dp),
    }


def _constant(value: int) -> Callable[..., int]:
    def fake(*_args: Any, **_kwargs: Any) -> int:
        return value

    fake.__replay_probe__ = True  # type: ignore[attr-defined]
    return fake


@contextlib.contextmanager
def fake_parallel(sizes: dict[str, int]) -> Any:
    """Replace the release's parallel-size getters (and rank getters: rank 0) by constants,
    in ``parallel_state`` and every ``sglang.*`` module holding them by name. The fork ends
    after the probe, so nothing is restored."""
    values = {
        "get_tensor_model_parallel_world_size": sizes["tp_size"],
        "get_moe_expert_parallel_world_size": sizes["moe_ep_size"],
        "get_moe_tensor_parallel_world_size": sizes["moe_tp_size"],
        "get_moe_data_parallel_world_size": sizes["moe_dp_size"],
        **{name: 0 for name in _RANK},
    }
    fakes = {name: _constant(value) for name, value in values.items()}
    patched: list[str] = []
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("sglang") or mod is None:
            continue
        for attr, obj in list(vars(mod).items()):
            if attr in fakes and isinstance(obj, types.FunctionType):
                setattr(mod, attr, fakes[attr])
                patched.append(f"{modname}.{attr}")
    yield patched


def _fields(server_args: Any) -> dict[str, Any]:
    try:
        from child_values import dump_fields
    except ImportError:  # unit tests
        from service.replay.child_values import dump_fields  # type: ignore[no-redef]
    return dump_fields(server_args)


def _publish(server_args: Any) -> None:
    """Publish the server args as the scheduler does, then seed the MoE flags from them."""
    import sglang.srt.server_args as sa

    publish = getattr(sa, "set_global_server_args_for_scheduler", None)
    if callable(publish):
        publish(server_args)
    from sglang.srt.layers.moe import utils as moe_utils

    init = moe_utils.initialize_moe_config
    if inspect.signature(init).parameters:
        init(server_args)
    else:
        init()
    _stamp_ranks()


def _stamp_ranks() -> None:
    """0.5.21+: the runtime context derives widths from the published config but a rank is
    written by the launcher; this process is rank 0 of every group."""
    context = sys.modules.get("sglang.srt.runtime_context")
    get_parallel = getattr(context, "get_parallel", None)
    derived = getattr(context, "_derived_widths", None)
    if not callable(get_parallel) or not callable(derived):
        return
    ranks = {
        name: 0
        for name, decl in derived().items()
        if name.endswith("_rank") and not getattr(decl, "fn", None)
    }
    if ranks:
        get_parallel().override_permanently(**ranks)


def _model_config(server_args: Any) -> Any:
    from sglang.srt.configs.model_config import ModelConfig

    return ModelConfig.from_server_args(server_args)


def _hf_text(mc: Any) -> Any:
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


def _moe_method(qc: Any) -> Any:
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


def _moe_shape(text: Any, fields: dict[str, Any]) -> tuple[int, int, int, int] | None:
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
    return (experts + _int(fields, "ep_num_redundant_experts", 0), text.hidden_size, inter, top_k)


def _model_and_quant(server_args: Any, out: dict[str, Any], check: bool) -> tuple[Any, Any]:
    """(ModelConfig, quant config or None), running the compatibility check if ``check``."""
    out["steps"].append("ModelConfig.from_server_args")
    mc = _model_config(server_args)
    quant = getattr(mc, "quantization", None)
    out["values"].update(
        quantization=quant,
        moe_intermediate_size=getattr(_hf_text(mc), "moe_intermediate_size", None),
    )
    if check:
        _check_compat(mc, out["sizes"], out)
    if not quant:
        return mc, None
    out["steps"].append("get_quant_config")
    qc = _quant_config(mc)
    out["values"]["weight_block_size"] = getattr(qc, "weight_block_size", None)
    return mc, qc


def probe_block_shape(server_args: Any, request: dict[str, Any], out: dict[str, Any]) -> None:
    """Model config -> compatibility check -> quant config -> the MoE layer (its quant
    method's ``create_weights``)."""
    _publish(server_args)
    mc, qc = _model_and_quant(server_args, out, check=True)
    if qc is None:  # the check does not apply: no verdict on a fix for it
        raise _ProbeUnreached(
            "the model config has no quantization: the block-shape checks "
            "do not apply (give the checkpoint's quantization_config)"
        )
    shape = _moe_shape(_hf_text(mc), out["fields"])
    method_cls = _moe_method(qc)
    if method_cls is None or shape is None:
        raise _ProbeUnreached(
            f"no MoE method or MoE shape for {type(qc).__name__}: create_weights not reached"
        )
    experts, hidden, inter, top_k = shape
    out["values"].update(num_experts=experts, top_k=top_k, hidden_size=hidden)
    why = _build_moe_layer(qc, shape, out)
    if why is None:
        return
    out["notes"].append(
        f"the MoE layer could not be built here ({why}); the MoE method's "
        "create_weights is called on a stand-in layer instead"
    )
    _create_weights(method_cls, qc, experts, hidden, inter, top_k, out)


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


def _build_moe_layer(qc: Any, shape: tuple[int, int, int, int], out: dict[str, Any]) -> str | None:
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
    except Exception as exc:  # noqa: BLE001 - a check's refusal is re-raised
        frames = traceback.extract_tb(exc.__traceback__)
        last = frames[-1] if frames else None
        if last is not None and _is_check_line(
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


def _create_weights(
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


def _registering_modules(root: str) -> dict[str, list[tuple[str, str]]]:
    """Modules of the release that register fused MoE functions, with their (a2a, runner)."""
    found: dict[str, list[tuple[str, str]]] = {}
    base = os.path.join(root, "sglang", "srt")
    for folder, _dirs, files in os.walk(base):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError), open(path, encoding="utf-8") as fh:
                pairs = _REGISTERS.findall(fh.read())
            if pairs:
                rel = os.path.relpath(path[:-3], root).replace(os.sep, ".")
                found[rel] = [(a, r) for a, r in pairs]
    return found


def probe_runner_a2a(
    server_args: Any, request: dict[str, Any], out: dict[str, Any], release_root: str
) -> None:
    """Publish the args, import every registering module, then build the model's MoE layer
    (its quant method constructs ``MoeRunner`` with the backend it picks: the fused-func
    lookup); with ``runner_backend`` given, ``MoeRunner(backend, MoeRunnerConfig())``."""
    _publish(server_args)
    from sglang.srt.layers.moe import utils as moe_utils

    registering = _registering_modules(release_root)
    failed: dict[str, str] = {}
    for modname in sorted(registering):
        try:
            __import__(modname)
        except Exception as exc:  # noqa: BLE001 - recorded; decides harness vs verdict
            failed[modname] = f"{type(exc).__name__}: {str(exc)[:200]}"
    out["values"]["registering_modules"] = sorted(registering)
    out["values"]["unimportable"] = failed
    a2a = moe_utils.get_moe_a2a_backend().value
    out["values"]["a2a_backend"] = a2a
    wanted = request.get("runner_backend")
    if not wanted:  # the release's own choice, through the layer the model builds
        mc, qc = _model_and_quant(server_args, out, check=True)  # runs before the load
        shape = _moe_shape(_hf_text(mc), out["fields"])
        if shape is None:
            raise _ProbeUnreached("the model has no MoE layers: no MoE runner is built")
        out["pending_registrations"] = [
            m for m, pairs in registering.items() if m in failed and any(p[0] == a2a for p in pairs)
        ]
        why = _build_moe_layer(qc, shape, out)
        if why is not None:
            raise _ProbeUnreached(f"the MoE layer could not be built here ({why})")
        return
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.moe_runner.runner import MoeRunner

    resolve = getattr(moe_utils, "resolve_moe_runner_backend", None)
    backend = resolve(wanted) if callable(resolve) else moe_utils.MoeRunnerBackend(wanted)
    out["values"]["runner_backend"] = backend.value
    if backend.is_auto():
        raise _ProbeUnreached(
            "runner_backend 'auto' is resolved by the quantization method "
            "when the model is built (leave runner_backend out)"
        )
    out["pending_registrations"] = [
        m for m, pairs in registering.items() if m in failed and (a2a, backend.value) in pairs
    ]
    out["steps"].append("MoeRunner(runner_backend, MoeRunnerConfig())")
    MoeRunner(backend, MoeRunnerConfig())


class _ProbeUnreached(Exception):
    """The probe could not reach the family's check (answered ``harness_error``)."""


#: release files whose refusals mean the probe's stand-in process state is incomplete
#: (a rank or group that a launched server writes), never a check of the flags
_STATE_FILES = ("sglang/srt/runtime_context.py", "sglang/srt/distributed/parallel_state.py")


def _is_check_line(frame: dict[str, Any] | None) -> bool:
    """Whether ``frame`` is a ``raise``/``assert`` line of the release outside its
    process-state bookkeeping (where a probe's refusal is a check's verdict)."""
    code = (frame or {}).get("code") or ""
    return (
        frame is not None
        and frame.get("kind") == "sglang"
        and frame.get("path") not in _STATE_FILES
        and (code.startswith(("raise ", "assert ", "assert(")) or code == "raise")
    )


def run_probe(
    server_args: Any,
    request: dict[str, Any],
    roots: dict[str, Any],
    classify: Callable[[BaseException, dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """Run the requested probe on validated ``server_args``; the outcome as a dict
    (``status``, ``probe`` with steps/values/notes, and the classified exception)."""
    family = str(request.get("family") or "")
    report: dict[str, Any] = {"family": family, "steps": [], "values": {}, "notes": []}
    result: dict[str, Any] = {"phase": "probe", "probe": report}
    try:
        fields = _fields(server_args)
        sizes = parallel_sizes(fields)
        report["sizes"] = sizes
        report["fields"] = fields
        with fake_parallel(sizes) as patched:
            report["faked"] = len(patched)
            if family == "moe_block_shape":
                probe_block_shape(server_args, request, report)
            elif family == "moe_runner_a2a":
                probe_runner_a2a(server_args, request, report, roots["release"])
            else:
                raise _ProbeUnreached(f"unknown probe family {family!r}")
        result["status"] = "passed"
    except _ProbeUnreached as exc:
        result.update(
            status="harness_error",
            harness_reason=str(exc),
            exception_type=None,
            message=None,
            frames=[],
            all_frames=[],
        )
    except BaseException as exc:  # noqa: BLE001 - classified below
        info = classify(exc, roots)
        result.update(info)
        if info["status"] == "raised" and not _is_check_line(info.get("origin")):
            origin = info.get("origin") or {}
            result["status"] = "harness_error"
            result["harness_reason"] = (
                f"the probe failed at {origin.get('path')}:{origin.get('line')} without "
                f"reaching a check of the release ({info['exception_type']})"
            )
        elif info["status"] == "raised" and report.pop("pending_registrations", None):
            result["status"] = "harness_error"
            result["harness_reason"] = (
                "a module registering this pair could not be "
                "imported here: the lookup is not the release's"
            )
    report.pop("pending_registrations", None)
    report.pop("fields", None)
    return result
