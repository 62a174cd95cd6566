"""What a rule card's conditions see besides the attributes: the facts (:func:`facts_for`)
and the functions they may call (:data:`CARD_FUNCTIONS`: ``attn_dp_enabled_of(args)``, ...).

The functions are pure summaries of 0.5.2x helpers that derived conditions call
(runtime_context.py, arg_groups/model_override_base.py). They receive the argument view and
read attributes through it, so every read is recorded as an input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.engine.expr.interpreter import (
    UNKNOWN,
    Provenance,
    Value,
    fact_key,
)
from service.engine.facts.core import fact_values, get_profile, model_arch_for

__all__ = ["CARD_FUNCTIONS", "facts_for"]


def facts_for(
    hardware: str | None = None,
    model_arch: str | None = None,
    model: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Value]:
    """Facts as the engine builds them: a hardware profile name, an architecture
    (guessed from ``model`` when not given) and environment variables."""
    hw = get_profile(hardware) if hardware else None
    arch = model_arch or model_arch_for(model)
    facts = dict(fact_values(hw, arch, env, model=model))
    if arch:
        key = fact_key("self.get_model_config().hf_config.architectures")
        facts.setdefault(key, Value([arch], Provenance("fact", f"model architecture {arch}")))
    return facts


def _attn_dp_enabled_of(cfg: Any) -> object:
    size = cfg.attn_dp_size
    if size is UNKNOWN or not isinstance(size, int):
        return UNKNOWN
    if size > 1:
        return True
    mode = cfg.ep_join_mode  # ep_scale_joiner_of: a scale joiner runs DP-attention paths
    return UNKNOWN if mode is UNKNOWN else mode == "scale"


def _num_dp_ranks_of(cfg: Any) -> object:
    dp, attn = cfg.dp_size, cfg.attn_dp_size
    if not isinstance(dp, int) or not isinstance(attn, int):
        return UNKNOWN
    return dp * attn


def _attention_backends_of(cfg: Any) -> object:
    base = cfg.attention_backend
    pre, dec = cfg.prefill_attention_backend, cfg.decode_attention_backend
    if UNKNOWN in (pre, dec) or ((not pre or not dec) and base is UNKNOWN):
        return UNKNOWN
    return (pre or base, dec or base)


CARD_FUNCTIONS = {
    "attn_dp_enabled_of": _attn_dp_enabled_of,
    "num_dp_ranks_of": _num_dp_ranks_of,
    "attention_backends_of": _attention_backends_of,
}
"""The functions a card's conditions may call, by name (``given`` is added per command)."""
