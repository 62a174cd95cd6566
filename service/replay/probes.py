"""Start-up probes: replay past argument validation, into the located check's own code.

Argument validation (``prepare_server_args`` + ``resolve_once``) is where replay used to
stop; many start-up refusals come later, when the model runner builds the model config,
the quantization config and the MoE layers. A :class:`StartupProbe` asks the replay child
to go on, after a command line passed validation, with the release's own code for one
*family* of checks (``child/probes.py`` runs it, on CPU torch, tensors on the ``meta``
device, the tensor/expert-parallel sizes faked from the resolved server args):

========================  ===================================================================
family                    what runs (the release's code)
========================  ===================================================================
``moe_block_shape``       ``ModelConfig.from_server_args`` on the generated model folder,
                          ``check_quantized_moe_compatibility`` (0.5.9+), ``get_quant_config``
                          and the ``FusedMoE`` layer (its quant method's ``create_weights``)
``moe_runner_a2a``        server args published, ``initialize_moe_config``, every module that
                          registers a fused MoE function imported, ``MoeRunner(backend, cfg)``
========================  ===================================================================

The model folder is the architecture's stand-in (:mod:`service.replay.model_configs`) with
the checkpoint's facts laid over it (``model_facts``: ``moe_intermediate_size``,
``quantization_config`` ...; :func:`~service.replay.model_configs.config_with_facts`).
The result is a :class:`~service.replay.results.ReplayResult` like validation's:
``passed`` (validation and the probe), ``raised`` with the check's exception, message and
frame (``phase`` ``probe`` when the probe refused, ``validate`` when validation did),
``harness_error`` when the probe could not reach a check (never a verdict). ``startup``
holds what the probe ran (steps, the sizes it faked, the values it computed).

The request travels in the job's environment (:data:`PROBE_ENV`, JSON), so it is part of
the replay cache key and reaches cold and warm children alike; the child removes it before
SGLang's validation runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from kb.settings import KBSettings
from service.engine import TriageResult
from service.replay.harness import replay_many
from service.replay.results import ReplayResult

__all__ = [
    "FAMILY_CHECKS",
    "PROBE_ENV",
    "StartupProbe",
    "probe_env",
    "probe_for_location",
    "replay_startup",
    "startup_request",
]

#: the environment variable carrying a job's probe request into the replay child
PROBE_ENV = "TRIAGE_REPLAY_STARTUP"

ProbeFamily = Literal["moe_block_shape", "moe_runner_a2a"]

#: (file suffix, function) of the release checks each family reaches
FAMILY_CHECKS: dict[str, tuple[tuple[str, str], ...]] = {
    "moe_block_shape": (
        ("model_executor/model_runner.py", "check_quantized_moe_compatibility"),
        ("model_runner_components/moe_ep_setup.py", "check_quantized_moe_compatibility"),
        ("layers/quantization/fp8.py", "create_weights"),
        ("layers/quantization/fp8.py", "create_fp8_moe_weight_"),
    ),
    "moe_runner_a2a": (("layers/moe/moe_runner/runner.py", "__init__"),),
}


class StartupProbe(BaseModel):
    """What to run after validation passed: one family and its parameters."""

    family: ProbeFamily
    runner_backend: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[a-z0-9_]{1,64}$",
        description="moe_runner_a2a: the runner the quantization method would pick "
        "(default: the resolved --moe-runner-backend)",
    )

    def request(self) -> dict[str, Any]:
        """The JSON the child reads."""
        return self.model_dump(exclude_none=True)


def probe_for_location(path: str, function: str) -> StartupProbe | None:
    """The probe that reaches a located check (``sglang/srt/...`` path and function), if
    one does: the engine's fixes for that check can then carry replay's verdict."""
    bare = function.rsplit(".", 1)[-1]  # "ModelRunner.check_..." as the locator names it
    for family, checks in FAMILY_CHECKS.items():
        if any(path.endswith(suffix) and bare == name for suffix, name in checks):
            return StartupProbe(family=family)  # type: ignore[arg-type]
    return None


#: checkpoint shape fields a triage's model facts or printed values may lay over the stand-in
SHAPE_FACTS = (
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_experts_per_tok",
    "n_routed_experts",
    "num_experts",
    "num_local_experts",
)


def _block(value: Any) -> list[int] | None:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return list(value)
    return None


def startup_request(result: TriageResult) -> tuple[StartupProbe, dict[str, Any]] | None:
    """(probe, model facts) for the fixes of a located check a probe reaches, else None.

    The facts are the checkpoint's as the answer knew them: its model facts
    (``moe_intermediate_size`` ..., ``quantization`` with ``weight_block_size``) and the
    values the crash message printed as facts (``moe_intermediate_size=768``,
    ``weight_block_size_n=128``: then the block is taken as square, and the method, if the
    answer does not name it, as ``fp8``, SGLang's block-quantized MoE method). Without a
    known block the block-shape probe answers "not reached", never a verdict."""
    loc = result.location
    probe = probe_for_location(loc.path, loc.function) if loc is not None else None
    if probe is None:
        return None
    known: dict[str, Any] = {f.name: f.value for f in result.model_facts}
    known.update(
        {p.expr: p.value for p in result.printed if p.role == "fact" and p.expr.isidentifier()}
    )
    facts: dict[str, Any] = {
        k: known[k] for k in SHAPE_FACTS if isinstance(known.get(k), int) and known[k] > 0
    }
    n = known.get("weight_block_size_n")
    block = _block(known.get("weight_block_size")) or (
        [n, n] if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    )
    method = known.get("quantization")
    method = (
        method
        if isinstance(method, str) and method.isidentifier()
        else ("fp8" if block is not None and "weight_block_size_n" in known else None)
    )
    if block is not None and method is not None:
        facts["quantization_config"] = {
            "quant_method": method,
            "weight_block_size": block,
            "activation_scheme": "dynamic",
        }
    return probe, facts


def probe_env(probe: StartupProbe, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` plus the probe request (:data:`PROBE_ENV`)."""
    return {**dict(env or {}), PROBE_ENV: json.dumps(probe.request(), sort_keys=True)}


def replay_startup(
    settings: KBSettings,
    release: str,
    hardware: str | None,
    argvs: Sequence[Sequence[str]],
    *,
    probe: StartupProbe,
    model_arch: str | None,
    model_facts: Mapping[str, Any] | None = None,
    release_root: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    job_timeout_s: float = 60.0,
    deadline_s: float | None = None,
    use_cache: bool = True,
    pool: bool | None = None,
) -> list[ReplayResult]:
    """Replay ``argvs`` of ``release`` on ``hardware`` through validation and then the
    ``probe`` (see the module docstring), with the checkpoint's ``model_facts`` laid over
    the architecture's stand-in config. One result per command line; the rest as
    :func:`~service.replay.harness.replay_many` (cache, warm pool, deadline).
    ``release_root`` defaults to the release fetched into the cache."""
    if release_root is None:
        from kb.sources import fetch_release

        release_root = fetch_release(
            release,
            wheel_dir=settings.wheel_dir,
            source_dir=settings.source_dir,
            index_url=getattr(settings, "pip_index_url", None),
        ).root
    return replay_many(
        release_root,
        release,
        argvs,
        hardware=hardware,
        model_arch=model_arch,
        timeout_s=timeout_s,
        job_timeout_s=job_timeout_s,
        env=probe_env(probe, env),
        settings=settings,
        use_cache=use_cache,
        deadline_s=deadline_s,
        pool=pool,
        model_facts=model_facts,
    )
