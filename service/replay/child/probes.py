"""Start-up probes: the release's own code past argument validation, in the replay child.

A script of the sandbox like ``runner.py`` (stdlib only plus the release, torch and the
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
import os
import re
from collections.abc import Callable
from typing import Any

try:  # run as a script in the sandbox: this folder is sys.path[0]
    from probe_moe import (
        ProbeUnreached,
        build_moe_layer,
        create_weights,
        hf_text,
        is_check_line,
        model_and_quant,
        moe_method,
        moe_shape,
    )
    from probe_state import fake_parallel, parallel_sizes, publish, server_args_fields
except ImportError:  # imported as service.replay.child.probes (unit tests)
    from service.replay.child.probe_moe import (  # type: ignore[no-redef]
        ProbeUnreached,
        build_moe_layer,
        create_weights,
        hf_text,
        is_check_line,
        model_and_quant,
        moe_method,
        moe_shape,
    )
    from service.replay.child.probe_state import (  # type: ignore[no-redef]
        fake_parallel,
        parallel_sizes,
        publish,
        server_args_fields,
    )

__all__ = ["FAMILIES", "probe_block_shape", "probe_runner_a2a", "run_probe"]

#: what a probe family runs (for reports)
FAMILIES = ("moe_block_shape", "moe_runner_a2a")
_REGISTERS = re.compile(r"@register_fused_func\(\s{0,4}\"(\w{1,40})\",\s{0,4}\"(\w{1,60})\"")


def probe_block_shape(server_args: Any, request: dict[str, Any], out: dict[str, Any]) -> None:
    """Model config -> compatibility check -> quant config -> the MoE layer (its quant
    method's ``create_weights``)."""
    publish(server_args)
    mc, qc = model_and_quant(server_args, out, check=True)
    if qc is None:  # the check does not apply: no verdict on a fix for it
        raise ProbeUnreached(
            "the model config has no quantization: the block-shape checks "
            "do not apply (give the checkpoint's quantization_config)"
        )
    shape = moe_shape(hf_text(mc), out["fields"])
    method_cls = moe_method(qc)
    if method_cls is None or shape is None:
        raise ProbeUnreached(
            f"no MoE method or MoE shape for {type(qc).__name__}: create_weights not reached"
        )
    experts, hidden, inter, top_k = shape
    out["values"].update(num_experts=experts, top_k=top_k, hidden_size=hidden)
    why = build_moe_layer(qc, shape, out)
    if why is None:
        return
    out["notes"].append(
        f"the MoE layer could not be built here ({why}); the MoE method's "
        "create_weights is called on a stand-in layer instead"
    )
    create_weights(method_cls, qc, experts, hidden, inter, top_k, out)


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
    publish(server_args)
    from sglang.srt.layers.moe import utils as moe_utils

    registering = _registering_modules(release_root)
    failed: dict[str, str] = {}
    for modname in sorted(registering):
        try:
            __import__(modname)
        except Exception as exc:
            failed[modname] = f"{type(exc).__name__}: {str(exc)[:200]}"
    out["values"]["registering_modules"] = sorted(registering)
    out["values"]["unimportable"] = failed
    a2a = moe_utils.get_moe_a2a_backend().value
    out["values"]["a2a_backend"] = a2a
    wanted = request.get("runner_backend")
    if not wanted:  # the release's own choice, through the layer the model builds
        mc, qc = model_and_quant(server_args, out, check=True)  # runs before the load
        shape = moe_shape(hf_text(mc), out["fields"])
        if shape is None:
            raise ProbeUnreached("the model has no MoE layers: no MoE runner is built")
        out["pending_registrations"] = [
            m for m, pairs in registering.items() if m in failed and any(p[0] == a2a for p in pairs)
        ]
        why = build_moe_layer(qc, shape, out)
        if why is not None:
            raise ProbeUnreached(f"the MoE layer could not be built here ({why})")
        return
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.moe_runner.runner import MoeRunner

    resolve = getattr(moe_utils, "resolve_moe_runner_backend", None)
    backend = resolve(wanted) if callable(resolve) else moe_utils.MoeRunnerBackend(wanted)
    out["values"]["runner_backend"] = backend.value
    if backend.is_auto():
        raise ProbeUnreached(
            "runner_backend 'auto' is resolved by the quantization method "
            "when the model is built (leave runner_backend out)"
        )
    out["pending_registrations"] = [
        m for m, pairs in registering.items() if m in failed and (a2a, backend.value) in pairs
    ]
    out["steps"].append("MoeRunner(runner_backend, MoeRunnerConfig())")
    MoeRunner(backend, MoeRunnerConfig())


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
        fields = server_args_fields(server_args)
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
                raise ProbeUnreached(f"unknown probe family {family!r}")
        result["status"] = "passed"
    except ProbeUnreached as exc:
        result.update(
            status="harness_error",
            harness_reason=str(exc),
            exception_type=None,
            message=None,
            frames=[],
            all_frames=[],
        )
    except BaseException as exc:
        info = classify(exc, roots)
        result.update(info)
        if info["status"] == "raised" and not is_check_line(info.get("origin")):
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
