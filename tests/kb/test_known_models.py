"""The known-model table (kb/data/known_models.json) and its loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.errors import ConfigError
from kb.known_models import DATA_FILE, known_model, known_model_by_name, known_models


def test_table_loads_and_every_entry_has_a_source_and_a_match() -> None:
    models = known_models()
    assert len(models) >= 10
    for m in models:
        assert m.source.strip() and (m.ids or m.patterns)
        assert m.quantization is None or m.quantization == m.quantization.lower()
    ids = [i.lower() for m in models for i in m.ids]
    assert len(ids) == len(set(ids)), "an id listed twice"


@pytest.mark.parametrize(("model_id", "arch", "quant", "mla"), [
    ("moonshotai/Kimi-K2-Instruct", "DeepseekV3ForCausalLM", "fp8", True),
    ("MOONSHOTAI/kimi-k2-thinking", "DeepseekV3ForCausalLM", "compressed-tensors", True),
    ("deepseek-ai/DeepSeek-R1", "DeepseekV3ForCausalLM", "fp8", True),
    ("meta-llama/Llama-3.1-8B-Instruct", "LlamaForCausalLM", "none", False),
    ("openai/gpt-oss-120b", "GptOssForCausalLM", "mxfp4", False),
    ("nvidia/DeepSeek-R1-0528-FP4", None, "modelopt_fp4", None),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", None, "fp8", False),
])  # fmt: skip
def test_lookup_by_id_and_pattern(
    model_id: str, arch: str | None, quant: str, mla: bool | None
) -> None:
    m = known_model(model_id)
    assert m is not None
    assert (m.architectures or [None])[0] == arch
    assert (m.quantization, m.mla) == (quant, mla)


def test_exact_id_beats_pattern_and_unknown_ids_miss() -> None:
    assert known_model("meta-llama/Llama-3.1-405B-Instruct-FP8").quantization == "fbgemm_fp8"
    assert known_model("someone/private-model") is None
    assert known_model("") is None
    assert (
        known_model("moonshotai/Kimi-K2-Thinking").matched("moonshotai/kimi-k2-thinking")
        == "moonshotai/Kimi-K2-Thinking"
    )


def test_folder_name_match_needs_exactly_one_entry() -> None:
    hit = known_model_by_name("Kimi-K2-Thinking")
    assert hit is not None and hit[0] == "moonshotai/Kimi-K2-Thinking"
    assert known_model_by_name("my-finetune") is None
    assert known_model_by_name("a/b") is None


def test_broken_table_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "known.json"
    bad.write_text(json.dumps({"models": [{"source": "x"}]}))
    with pytest.raises(ConfigError):
        known_models(bad)
    bad.write_text("{not json")
    with pytest.raises(ConfigError):
        known_models(bad)
    assert DATA_FILE.is_file()
