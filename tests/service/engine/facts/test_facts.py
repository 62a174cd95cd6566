"""Declared hardware/model/environment facts, checked against real SGLang conditions."""

from __future__ import annotations

import pytest

from kb.errors import ConfigError
from kb.store import Store
from service.engine.expr.interpreter import UNKNOWN, Env, evaluate, fact_key
from service.engine.facts.core import (
    ARCH_BY_MODEL,
    PROFILES,
    env_fields_from_source,
    fact_values,
    get_profile,
    model_arch_for,
    profile_from_gpus,
)
from service.engine.logparse.parse import parse_log

REQUIRED = {
    "h100-x8": ("nvidia", 90, 8, 80), "h200-x8": ("nvidia", 90, 8, 141),
    "h20-x8": ("nvidia", 90, 8, 96), "b200-x8": ("nvidia", 100, 8, 180),
    "gb200-x4": ("nvidia", 100, 4, None), "b300-x8": ("nvidia", 103, 8, None),
    "rtx-pro-6000-x8": ("nvidia", 120, 8, 96), "rtx-5090-x1": ("nvidia", 120, 1, None),
    "a100-x8": ("nvidia", 80, 8, 80), "l40s-x4": ("nvidia", 89, 4, None),
    "mi300x-x8": ("amd", None, 8, None), "cpu": ("cpu", None, 0, None),
}  # fmt: skip


@pytest.fixture(scope="module")
def store(kb) -> Store:
    return kb.store


def facts_for(hw: str, **kw: object) -> dict:
    return fact_values(get_profile(hw), kw.pop("arch", None), **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- profiles


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_listed_profiles(name: str) -> None:
    vendor, sm, count, mem = REQUIRED[name]
    p = PROFILES[name]
    assert get_profile(name) == p and p.name == name
    assert (p.vendor, p.sm, p.count) == (vendor, sm, count)
    if mem is not None:
        assert p.memory_gb == mem
    assert (p.cuda is not None) == (vendor == "nvidia")


@pytest.mark.parametrize(
    ("given", "name", "count"),
    [("h100-x2", "h100-x2", 2), ("H100_X4", "h100-x4", 4), ("8xH100", "h100-x8", 8),
     ("rtx-pro-6000", "rtx-pro-6000-x8", 8), ("RTX PRO 6000 Blackwell", "rtx-pro-6000-x8", 8),
     ("b200", "b200-x8", 8), ("nvidia-b200-x2", "b200-x2", 2), ("mi300x-x4", "mi300x-x4", 4),
     ("rtx-pro-6000-x1", "rtx-pro-6000-x1", 1)],
)  # fmt: skip
def test_aliases_and_counts(given: str, name: str, count: int) -> None:
    p = get_profile(given)
    assert (p.name, p.count) == (name, count)


def test_unknown_profile_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as err:
        get_profile("tpu-v5")
    assert "h100-x8" in err.value.message and "rtx-pro-6000-x8" in err.value.message
    assert "h100-x8" in err.value.details["valid"]


def test_profile_from_log_gpus() -> None:
    parsed = parse_log(
        "GPU 0,1,2,3,4,5,6,7: NVIDIA RTX PRO 6000 Blackwell Server Edition\nValueError: x\n"
    )
    p = profile_from_gpus(parsed.gpus)
    assert p is not None and p.sm == 120 and p.count == 8 and p.name == "rtx-pro-6000-x8"
    h = profile_from_gpus(parse_log("running on 2x H100 80GB HBM3\nValueError: x\n").gpus)
    assert h is not None and (h.name, h.sm, h.count, h.memory_gb) == ("h100-x2", 90, 2, 80)
    assert profile_from_gpus([]) is None


# ---------------------------------------------------------------------------- models


@pytest.mark.parametrize(
    ("model", "arch"),
    [("/models/Kimi-K2.6", "KimiK25ForConditionalGeneration"),
     ("moonshotai/Kimi-K2.5", "KimiK25ForConditionalGeneration"),
     ("moonshotai/Kimi-K2-Instruct-0905", "DeepseekV3ForCausalLM"),
     ("moonshotai/Kimi-K2-Thinking", "DeepseekV3ForCausalLM"),
     ("deepseek-ai/DeepSeek-V3-0324", "DeepseekV3ForCausalLM"),
     ("deepseek-ai/DeepSeek-R1", "DeepseekV3ForCausalLM"),
     ("deepseek-ai/DeepSeek-V3.2-Exp", "DeepseekV32ForCausalLM"),
     ("<DeepSeek-V4-Flash>", "DeepseekV4ForCausalLM"),
     ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "Llama4ForConditionalGeneration"),
     ("meta-llama/Llama-3.1-8B-Instruct", "LlamaForCausalLM"),
     ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen3MoeForCausalLM"),
     ("Qwen/Qwen3-32B", "Qwen3ForCausalLM"),
     ("Qwen/Qwen3.5-397B-A17B", "Qwen3_5MoeForConditionalGeneration"),
     ("openai/gpt-oss-120b", "GptOssForCausalLM"),
     ("zai-org/GLM-4.6", "Glm4MoeForCausalLM"), ("zai-org/GLM-4.5-Air", "Glm4MoeForCausalLM"),
     ("mistralai/Mixtral-8x7B-Instruct-v0.1", "MixtralForCausalLM"),
     ("google/gemma-3-27b-it", "Gemma3ForConditionalGeneration"),
     ("MiniMaxAI/MiniMax-M2", "MiniMaxM2ForCausalLM"),
     ("/hf/hub/models--Qwen--Qwen3-8B/snapshots/0123abcd", "Qwen3ForCausalLM"),
     ("/models/my-finetune", None), (None, None), ("", None)],
)  # fmt: skip
def test_model_arch_for(model: str | None, arch: str | None) -> None:
    assert model_arch_for(model) == arch


def test_every_mapped_architecture_is_a_real_sglang_class(store: Store) -> None:
    missing = []
    for _, arch in ARCH_BY_MODEL:
        hit = store.query(
            "SELECT 1 FROM functions WHERE class_name = ? LIMIT 1", (arch,)
        ) or store.query(
            "SELECT 1 FROM chunks WHERE path LIKE 'sglang/srt/models/%' AND text LIKE ? LIMIT 1",
            (f"%class {arch}(%",),
        )
        if not hit:
            missing.append(arch)
    assert missing == []


def test_model_facts_feed_arch_conditions() -> None:
    f = fact_values(None, "KimiK25ForConditionalGeneration", model="/models/Kimi-K2.6")
    env = Env({}, facts=f)
    cond = (
        'self.get_model_config().hf_config.architectures[0] in ["KimiK25ForConditionalGeneration"]'
    )
    assert evaluate(cond, env).truth is True
    assert evaluate('model_arch == "DeepseekV3ForCausalLM"', env).truth is False
    assert (
        evaluate("model_config_of(server_args).hf_config.architectures[0]", env).value
        == "KimiK25ForConditionalGeneration"
    )
    assert "guessed from the model's name" in f["model_arch"].provenance.detail
    assert "/models/" not in f["model_arch"].provenance.detail  # alike for every path
    assert "declared" in fact_values(None, "X")["model_arch"].provenance.detail


# ------------------------------------------------------------------------- hardware


def _guard(store: Store, version: str, function: str, needle: str) -> str:
    for chk in store.checks(version, function=function):
        for g in chk.guards:
            if needle in g["condition"]:
                return g["condition"]
    raise AssertionError(f"no guard with {needle!r} in {function} of {version}")


def test_real_0511_conditions_differ_by_hardware(store: Store) -> None:
    fn = "ServerArgs._handle_attention_backend_compatibility"
    blackwell = _guard(store, "0.5.11", fn, "is_blackwell_supported()")
    sm100 = _guard(store, "0.5.11", fn, "not is_sm100_supported()")
    local = {"prefill_backend": "trtllm_mha", "decode_backend": "trtllm_mha"}
    got = {}
    for hw in ("b200-x8", "rtx-pro-6000-x8", "h100-x8"):
        env = Env({}, facts={**facts_for(hw), **local})
        got[hw] = (evaluate(blackwell, env).truth, evaluate(sm100, env).truth)
    # `not is_blackwell_supported()`; `prefill == "trtllm_mha" and not is_sm100_supported()`
    assert got == {
        "b200-x8": (False, False),
        "rtx-pro-6000-x8": (False, True),
        "h100-x8": (True, True),
    }


def test_real_0523_platform_conditions(store: Store) -> None:
    cond = _guard(
        store, "0.5.23", "handle_attention_backend_compatibility", "and not get_platform().is_sm100"
    )
    truths = {}
    for hw in ("b200-x8", "rtx-pro-6000-x8", "h100-x8"):
        env = Env({"attn_cp_size": 2}, facts={**facts_for(hw), "prefill_backend": "trtllm_mha"})
        r = evaluate(cond, env)
        truths[hw] = r.truth
        assert r.unknowns == ()
    assert truths == {"b200-x8": False, "rtx-pro-6000-x8": True, "h100-x8": True}


def test_probe_semantics_follow_sglang() -> None:
    def v(hw: str, key: str) -> object:
        return facts_for(hw)[key].value

    assert v("b300-x8", "is_sm100_supported()") is True  # major 10 (sm103)
    assert v("rtx-pro-6000-x8", "is_sm120_supported()") is True
    assert v("rtx-pro-6000-x8", "is_blackwell_supported()") is True
    assert v("h100-x8", "is_hopper_with_cuda_12_3()") is True
    assert v("a100-x8", "is_sm90_supported()") is False
    assert v("mi300x-x8", "is_hip()") is True and v("mi300x-x8", "is_cuda()") is False
    assert v("mi300x-x8", "is_sm90_supported()") is False
    assert v("cpu", "torch.cuda.is_available()") is False
    assert v("h100-x8", "get_device_capability()") == (9, 0)
    assert v("b200-x8", "get_device_sm()") == 100
    assert v("rtx-pro-6000-x8", "torch.cuda.device_count()") == 8
    assert v("h200-x8", "gpu_mem") == 141 * 1024
    assert v("b200-x8", "get_platform().is_sm100") is True
    assert v("h100-x8", "get_platform()") == v("b200-x8", "get_platform()")  # a view
    prov = facts_for("rtx-pro-6000-x8")["is_sm100_supported()"].provenance
    assert prov.kind == "fact" and prov.detail == "hardware profile rtx-pro-6000-x8 (sm120)"
    off = facts_for("b200-x8", env={"SGLANG_IS_FLASHINFER_AVAILABLE": "false"})
    assert off["is_flashinfer_available()"].value is False
    assert off["get_platform().has_flashinfer"].value is False


def test_fact_keys_are_canonical_and_round_trip() -> None:
    facts = fact_values(
        get_profile("h100-x8"), "DeepseekV3ForCausalLM", {"SGLANG_ENABLE_SPEC_V2": "true"}
    )
    env = Env({}, facts=facts)
    # how SGLang spells the expressions whose canonical key drops or renames the args root
    spelled = {
        "get_model_config().hf_config.architectures": "self.get_model_config().hf_config.architectures",
        "model_config_of(args)": "model_config_of(server_args)",
    }
    for key, val in facts.items():
        src = spelled.get(key, key)
        assert fact_key(src) == key
        assert evaluate(src, env).value == val.value, key
    assert fact_key('get_bool_env_var("SGLANG_ENABLE_SPEC_V2")') in facts
    assert evaluate("is_sm90_supported() and not is_sm100_supported()", env).truth is True


# ----------------------------------------------------------------------- environment


def test_env_facts_both_styles(store: Store) -> None:
    fields = env_fields_from_source(store.file_text("0.5.11", "sglang/srt/environ.py") or "")
    assert fields["SGLANG_USE_MODELSCOPE"].kind == "bool"
    env = {
        "SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE": "1",
        "SGLANG_TEST_RETRACT": "yes",
        "SGLANG_PREFETCH_BLOCK_SIZE_MB": "32",
        "SGLANG_USE_AITER": "maybe",
    }
    f = fact_values(None, None, env, env_fields=fields)
    e = Env({}, facts=f)
    # a real condition of 0.5.11 that reads an `envs.X.get()` value
    cond = _guard(
        store,
        "0.5.11",
        "ServerArgs._handle_model_specific_adjustments",
        "envs.SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE.get()",
    )
    assert evaluate(cond, e).truth is True
    assert evaluate("envs.SGLANG_TEST_RETRACT.get()", e).truth is True  # EnvBool: "yes"
    assert evaluate('get_bool_env_var("SGLANG_TEST_RETRACT")', e).truth is False  # only 1/true
    assert evaluate('get_bool_env_var("SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE", "false")', e).truth is True
    assert evaluate("envs.SGLANG_PREFETCH_BLOCK_SIZE_MB.get() == 32", e).truth is True
    assert evaluate("envs.SGLANG_USE_AITER.get()", e).truth is False  # invalid -> default False
    # unset: the declared default, marked as a default; set ones are facts
    assert f["envs.SGLANG_USE_MODELSCOPE.get()"].value is False
    assert f["envs.SGLANG_USE_MODELSCOPE.get()"].provenance.kind == "default"
    assert f["envs.SGLANG_USE_MODELSCOPE.is_set()"].value is False
    assert f["envs.SGLANG_TEST_RETRACT.is_set()"].provenance.kind == "fact"
    # without the declarations, values are guessed from their text; nothing else is claimed
    g = Env({}, facts=fact_values(None, None, {"SGLANG_X": "true", "SGLANG_N": "4"}))
    assert evaluate("envs.SGLANG_X.get() and envs.SGLANG_N.get() == 4", g).truth is True
    assert evaluate("envs.SGLANG_OTHER.get()", g).truth is UNKNOWN
