"""The checkpoint's shape as model-fact rows, under the names SGLang's checks read it by.

:func:`shape_rows` turns the whitelisted ``config.json`` fields (or a known-model
entry laid out like one) into ``(name, value, keys, cite key)`` rows for
:func:`~service.engine.facts.checkpoint.fact_rows`:

* the integer fields of :data:`SHAPE_INTS` under the model config's chains: the text
  config's always (``model_config.hf_text_config.hidden_size``, as
  ``self.model_config`` and a ``model_config`` parameter read it), the top-level
  ``hf_config``'s when the model nests no ``text_config`` (a vision-language model's
  top level has no text shape; the fields SGLang read there before keep their keys);
* ``moe_intermediate_size`` and ``weight_block_size_n`` also under the local names of
  the quantized-MoE block-shape check (``check_quantized_moe_compatibility``, in
  ``model_runner.py`` up to 0.5.12 and ``model_runner_components/moe_ep_setup.py``
  after), so that check is decided from the model when the crash printed no numbers;
  ``weight_block_size`` as ``quant_config.weight_block_size`` when the checkpoint's
  method is the one in use;
* the layer layout and the vision tower (``layer_types`` as ``{type: count}``,
  ``has_vision``, ``vision_model_type``) as bare ``checkpoint_*`` names for rule cards.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kb.conditions import fact_key

__all__ = ["SHAPE_INTS", "ShapeRow", "block_size", "layout", "shape_rows"]

#: integer shape fields turned into facts under the model config's chains
SHAPE_INTS = (
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_experts_per_tok",
    "kv_lora_rank",
    "q_lora_rank",
    "max_position_embeddings",
    "sliding_window",
    "full_attention_interval",
)
#: fields read under the top-level ``hf_config`` before the text config was (kept for VLMs)
_TOP_LEVEL_TOO = frozenset(
    {
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "kv_lora_rank",
        "q_lora_rank",
    }
)
_MAX_LAYER_TYPES = 4096
_FIELD_ROOTS = ("get_model_config().hf_config", "model_config_of(args).hf_config")
_TEXT_ROOTS = (
    "model_config.hf_text_config",
    "get_model_config().hf_text_config",
    "model_config_of(args).hf_text_config",
)
_TOP_ROOTS = (*_FIELD_ROOTS, "model_config.hf_config")
_MOE_SIZE_KEYS = tuple(
    dict.fromkeys(
        fact_key(e)
        for e in (
            "moe_intermediate_size",
            "getattr(model_config.hf_text_config, 'moe_intermediate_size', None)",
            "getattr(self.model_config.hf_text_config, 'moe_intermediate_size', None)",
        )
    )
)

#: (name, value, evaluator keys, the shape field whose citation applies)
ShapeRow = tuple[str, Any, tuple[str, ...], str]


def _text(hf: Mapping[str, Any]) -> Mapping[str, Any]:
    text = hf.get("text_config")
    return text if isinstance(text, dict) else {}


def _field(hf: Mapping[str, Any], name: str) -> Any:
    text = _text(hf)
    return text[name] if name in text else hf.get(name)


def block_size(hf: Mapping[str, Any]) -> list[int] | None:
    """``quantization_config.weight_block_size`` ([n, k] of positive ints), else None."""
    cfg = hf.get("quantization_config") or _text(hf).get("quantization_config")
    block = cfg.get("weight_block_size") if isinstance(cfg, dict) else None
    if (
        isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        return list(block)
    return None


def layout(hf: Mapping[str, Any]) -> dict[str, Any]:
    """``layer_types`` as ``{type: count}``, ``has_vision`` and ``vision_model_type``."""
    out: dict[str, Any] = {}
    kinds = _field(hf, "layer_types")
    if (
        isinstance(kinds, list)
        and 0 < len(kinds) <= _MAX_LAYER_TYPES
        and all(isinstance(k, str) for k in kinds)
    ):
        counts: dict[str, int] = {}
        for k in kinds:
            counts[k[:64]] = counts.get(k[:64], 0) + 1
        out["layer_types"] = counts
    vision = hf.get("vision_config")
    if isinstance(vision, dict):
        out["has_vision"] = True
        if isinstance(vision.get("model_type"), str):
            out["vision_model_type"] = vision["model_type"]
    return out


def shape_rows(
    hf: Mapping[str, Any],
    method: str | None,
    user_quantization: str | None,
    known_layout: Mapping[str, Any] | None = None,
) -> list[ShapeRow]:
    """The shape rows of a whitelisted ``config.json`` dict (see the module docstring);
    ``method`` is the checkpoint's quantization method, ``known_layout`` a table entry's
    layout facts (used instead of reading ``layer_types``/``vision_config``)."""
    rows: list[ShapeRow] = []
    nested = bool(_text(hf))
    for name in SHAPE_INTS:
        value = _field(hf, name)
        if isinstance(value, int) and not isinstance(value, bool):
            roots = (
                _TEXT_ROOTS + (_FIELD_ROOTS if name in _TOP_LEVEL_TOO else ())
                if nested
                else _TEXT_ROOTS + _TOP_ROOTS
            )
            keys = tuple(f"{r}.{name}" for r in roots)
            rows.append(
                (
                    name,
                    value,
                    keys + (_MOE_SIZE_KEYS if name == "moe_intermediate_size" else ()),
                    name,
                )
            )
    block = block_size(hf)
    if block is not None:
        in_use = not user_quantization or user_quantization == method
        rows.append(
            (
                "weight_block_size",
                block,
                ("checkpoint_weight_block_size",)
                + (("quant_config.weight_block_size",) if in_use else ()),
                "weight_block_size",
            )
        )
        rows.append(
            ("weight_block_size_n", block[0], ("weight_block_size_n",), "weight_block_size")
        )
    found = dict(known_layout) if known_layout is not None else layout(hf)
    rows += [(name, value, (f"checkpoint_{name}",), name) for name, value in found.items()]
    return rows
