"""Stand-in model folders for replay: a ``config.json`` per declared architecture.

SGLang's validation reads the model's Hugging Face config (architecture,
attention shape, MoE layout, quantization) but never its weights, so a folder
holding only ``config.json`` (plus ``generation_config.json``) is enough for
``--model-path``. The fields follow the public configs of the models named
below; a speculative draft gets a matching EAGLE/EAGLE3 head config.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from kb.errors import ConfigError

__all__ = [
    "MODEL_CONFIGS",
    "config_with_facts",
    "draft_config",
    "supported_archs",
    "write_model_dir",
]

_DEEPSEEK_V3: dict[str, Any] = {  # deepseek-ai/DeepSeek-V3 (FP8 block quantized)
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
    "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "seq_aux": True, "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]},
}  # fmt: skip

_KIMI_TEXT = {  # moonshotai/Kimi-K2.5 text model (DeepSeek-V3 layout, 384 experts)
    **{k: v for k, v in _DEEPSEEK_V3.items() if k != "quantization_config"},
    "first_k_dense_replace": 1, "num_attention_heads": 64, "num_key_value_heads": 64,
    "n_routed_experts": 384, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827,
    "max_position_embeddings": 262144, "rope_theta": 50000.0, "vocab_size": 163840,
    "eos_token_id": 163585, "bos_token_id": 163584, "num_nextn_predict_layers": 0,
    "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
}  # fmt: skip

MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "DeepseekV3ForCausalLM": _DEEPSEEK_V3,
    "KimiK25ForConditionalGeneration": {
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "text_config": _KIMI_TEXT, "ignore_index": -100, "media_placeholder_token_id": 163605,
        "pad_token_id": 163839, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
        "vision_config": {
            "patch_size": 14, "init_pos_emb_height": 64, "init_pos_emb_width": 64,
            "init_pos_emb_time": 4, "pos_emb_type": "divided_fixed", "num_attention_heads": 16,
            "num_hidden_layers": 27, "hidden_size": 1152, "intermediate_size": 4304,
            "merge_kernel_size": [2, 2], "video_attn_type": "spatial_temporal",
            "merge_type": "sd2_tpool", "mm_projector_type": "patchmerger",
            "mm_hidden_size": 1152, "projector_hidden_act": "gelu", "projector_ln_eps": 1e-05,
            "text_hidden_size": 7168,
        },
    },
    "LlamaForCausalLM": {  # meta-llama/Llama-3.1-8B-Instruct
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
        "vocab_size": 128256,
    },
    "Qwen3MoeForCausalLM": {  # Qwen/Qwen3-30B-A3B
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
        "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
        "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
        "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
        "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
        "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
        "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
    },
    "GptOssForCausalLM": {  # openai/gpt-oss-120b (MXFP4 experts)
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4,
        "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
        "initializer_range": 0.02, "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
        "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
        "output_router_logits": False, "pad_token_id": 199999, "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn",
                         "truncate": False},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
        "swiglu_limit": 7.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "use_cache": True, "vocab_size": 201088,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                           "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"],
                                "quant_method": "mxfp4"},
    },
    "Llama4ForConditionalGeneration": {  # meta-llama/Llama-4-Scout-17B-16E-Instruct
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
        "boi_token_index": 200080, "eoi_token_index": 200081, "image_token_index": 200092,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "llama4_text", "attention_bias": False, "attention_chunk_size": 8192,
            "attention_dropout": 0.0, "bos_token_id": 200000,
            "eos_token_id": [200001, 200007, 200008], "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 5120, "initializer_range": 0.02, "interleave_moe_layer_step": 1,
            "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "max_position_embeddings": 10485760, "no_rope_layers": [], "num_attention_heads": 40,
            "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8,
            "num_local_experts": 16, "output_router_logits": False, "pad_token_id": 200018,
            "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "router_aux_loss_coef": 0.001,
            "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "torch_dtype": "bfloat16", "use_qk_norm": True, "vocab_size": 202048,
        },
        "vision_config": {
            "model_type": "llama4_vision_model", "attention_dropout": 0.0, "hidden_act": "gelu",
            "hidden_size": 1408, "image_size": 336, "intermediate_size": 5632,
            "multi_modal_projector_bias": False, "norm_eps": 1e-05, "num_attention_heads": 16,
            "num_channels": 3, "num_hidden_layers": 34, "patch_size": 14,
            "pixel_shuffle_ratio": 0.5, "projector_dropout": 0.0, "projector_input_dim": 4096,
            "projector_output_dim": 4096, "rope_theta": 10000, "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default", "vision_output_dim": 4096,
        },
    },
}  # fmt: skip


def supported_archs() -> list[str]:
    """The architectures replay can stand in for."""
    return sorted(MODEL_CONFIGS)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg.get("text_config") or cfg


#: keys a checkpoint's facts may not set: they choose code (``auto_map``) or the model class
_FIXED_KEYS = frozenset({"auto_map", "architectures", "model_type", "text_config", "vision_config"})
_FACT_VALUE_MAX = 4000  # characters of JSON per fact


def config_with_facts(arch: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The stand-in config of ``arch`` with a checkpoint's facts laid over it: each key is
    set in the text config (``text_config`` when the model has one, else the top level),
    ``quantization_config`` at the top level (where SGLang's MoE check reads it); a value
    None removes the key. Raises :class:`ConfigError` for an unknown architecture, a key
    that chooses code or the model class, or a value that is not small plain JSON."""
    if arch not in MODEL_CONFIGS:
        raise ConfigError(
            f"replay has no model config for {arch!r}",
            details={"model_arch": arch, "valid": supported_archs()},
        )
    config = copy.deepcopy(MODEL_CONFIGS[arch])
    text = _text_config(config)
    for key, value in facts.items():
        if not isinstance(key, str) or not key.isidentifier() or key in _FIXED_KEYS:
            raise ConfigError(
                f"model fact {key!r} cannot be set for replay", details={"fact": str(key)}
            )
        try:
            blob = json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"model fact {key!r} is not JSON", details={"fact": key}) from exc
        if len(blob) > _FACT_VALUE_MAX:
            raise ConfigError(f"model fact {key!r} is too large", details={"fact": key})
        target = config if key == "quantization_config" else text
        if value is None:
            target.pop(key, None)
        else:
            target[key] = json.loads(blob)
    return config


def draft_config(target_arch: str, algorithm: str | None) -> dict[str, Any]:
    """A speculative draft matching the target: an EAGLE3 head, an EAGLE head for
    Llama targets, otherwise a copy of the target's own config (NEXTN/MTP and
    standalone drafts share the target's architecture)."""
    target = MODEL_CONFIGS[target_arch]
    algo = (algorithm or "").upper()
    if algo not in ("EAGLE3", "EAGLE") or (algo == "EAGLE" and target_arch != "LlamaForCausalLM"):
        return copy.deepcopy(target)
    text = _text_config(target)
    arch = "LlamaForCausalLMEagle3" if algo == "EAGLE3" else "LlamaForCausalLMEagle"
    hidden = int(text.get("hidden_size", 4096))
    heads = int(text.get("num_attention_heads", 32))
    return {
        "architectures": [arch], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": int(text.get("intermediate_size", 4 * hidden)),
        "num_attention_heads": heads, "num_key_value_heads": min(8, heads),
        "head_dim": 128, "num_hidden_layers": 1, "hidden_act": "silu",
        "max_position_embeddings": int(text.get("max_position_embeddings", 131072)),
        "rms_norm_eps": 1e-05, "rope_theta": float(text.get("rope_theta", 10000)),
        "vocab_size": int(text.get("vocab_size", 128256)), "draft_vocab_size": 32000,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 1,
    }  # fmt: skip


def write_model_dir(dest: Path, arch: str) -> Path:
    """Write ``config.json`` (and ``generation_config.json``) for ``arch`` into ``dest``."""
    if arch not in MODEL_CONFIGS:
        raise ConfigError(
            f"replay has no model config for {arch!r}; known: {', '.join(supported_archs())}",
            details={"model_arch": arch, "valid": supported_archs()},
        )
    return write_config_dir(dest, copy.deepcopy(MODEL_CONFIGS[arch]))


def write_config_dir(dest: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` as a stand-in model folder at ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(config, indent=1))
    text = _text_config(config)
    gen = {"bos_token_id": text.get("bos_token_id", 0), "eos_token_id": text.get("eos_token_id", 1)}
    (dest / "generation_config.json").write_text(json.dumps(gen))
    return dest
