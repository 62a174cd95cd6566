"""The shape fields of the known-model table: every value is cited, typed and consistent,
and the loader refuses a table that enters a value without a source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.errors import ConfigError
from kb.known_models import DATA_FILE, SHAPE_FIELDS, known_model, known_models

_INTS = [
    f
    for f in SHAPE_FIELDS
    if f not in ("weight_block_size", "layer_types", "has_vision", "vision_model_type")
]


def _shaped() -> list:
    return [m for m in known_models() if m.shape()]


def test_the_table_has_cited_shapes_for_popular_checkpoints() -> None:
    shaped = _shaped()
    assert len(shaped) >= 5
    fields = {f for m in shaped for f in m.shape()}
    # what the post-validation checks read is covered somewhere in the table
    assert {
        "moe_intermediate_size",
        "weight_block_size",
        "num_key_value_heads",
        "hidden_size",
        "layer_types",
    } <= fields


@pytest.mark.parametrize("entry", _shaped(), ids=lambda m: m.label())
def test_every_shape_value_has_a_source(entry) -> None:
    for name in entry.shape():
        cite = entry.cite(name)
        assert cite, (entry.label(), name)
        where = cite.split(" (", 1)[0]
        # owner/repo@<40-hex commit>:path, or a URL
        if not where.startswith("https://"):
            repo, _, rest = where.partition("@")
            commit, _, path = rest.partition(":")
            assert repo.count("/") == 1 and path, cite
            assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), cite


@pytest.mark.parametrize("entry", _shaped(), ids=lambda m: m.label())
def test_shape_values_are_typed_and_consistent(entry) -> None:
    shape = entry.shape()
    for name in _INTS:
        if name in shape:
            assert isinstance(shape[name], int) and not isinstance(shape[name], bool)
            assert shape[name] > 0, (entry.label(), name)
    heads, kv = shape.get("num_attention_heads"), shape.get("num_key_value_heads")
    if heads and kv:
        assert heads % kv == 0, "query heads come in whole groups per KV head"
    if "moe_intermediate_size" in shape:
        assert entry.num_experts is None or shape.get("num_experts_per_tok", 0) <= entry.num_experts
    if "layer_types" in shape:
        counts = shape["layer_types"]
        assert all(isinstance(v, int) and v > 0 for v in counts.values())
        if entry.num_hidden_layers:
            assert sum(counts.values()) == entry.num_hidden_layers
    if "weight_block_size" in shape:
        assert entry.quantization not in (None, "none"), "a block size belongs to quantized weights"
        n, k = shape["weight_block_size"]
        assert n > 0 and k > 0


@pytest.mark.parametrize("entry", _shaped(), ids=lambda m: m.label())
def test_expert_and_layer_layout_agree(entry) -> None:
    shape = entry.shape()
    per_tok = shape.get("num_experts_per_tok")
    if per_tok is not None and entry.num_experts is not None:
        assert 0 < per_tok <= entry.num_experts, "a token picks some of the experts"
    interval, kinds = shape.get("full_attention_interval"), shape.get("layer_types")
    if interval and kinds and entry.num_hidden_layers:
        assert kinds.get("full_attention") == entry.num_hidden_layers // interval
    if shape.get("vision_model_type"):
        assert shape.get("has_vision") is True


@pytest.mark.parametrize(
    "model_id",
    [
        "deepseek-ai/DeepSeek-R1",
        "deepseek-ai/DeepSeek-V3.2",
        "deepseek-ai/DeepSeek-V4-Pro",
        "moonshotai/Kimi-K2-Instruct",
        "moonshotai/Kimi-K2.5",
        "Qwen/Qwen3-235B-A22B",
        "Qwen/Qwen3-Coder-480B-A35B-Instruct",
        "Qwen/Qwen3-VL-30B-A3B-Instruct",
        "Qwen/Qwen3.5-35B-A3B",
        "MiniMaxAI/MiniMax-M2.5",
        "zai-org/GLM-5-FP8",
        "meta-llama/Llama-3.1-405B",
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        "mistralai/Mixtral-8x7B-v0.1",
        "google/gemma-3-4b-it",
        "openai/gpt-oss-120b",
    ],
)
def test_popular_checkpoints_have_cited_shapes(model_id: str) -> None:
    """Issue #27 item 4: the checkpoints users run most carry the fields the checks read."""
    entry = known_model(model_id)
    assert entry is not None and entry.matched(model_id).lower() == model_id.lower()
    shape = entry.shape()
    assert "hidden_size" in shape
    assert all(entry.cite(name) for name in shape)
    if entry.num_experts:
        assert "moe_intermediate_size" in shape or "num_experts_per_tok" in shape


def test_ids_are_unique_across_entries() -> None:
    seen: dict[str, str] = {}
    for m in known_models():
        for i in m.ids:
            assert i.lower() not in seen, (i, seen.get(i.lower()))
            seen[i.lower()] = m.label()


def test_lookup_gives_the_entry_and_its_citation() -> None:
    for m in _shaped():
        for i in m.ids:
            hit = known_model(i.upper())  # ids match without case
            assert hit is m
            assert hit.shape() == m.shape()
    unshaped = next(m for m in known_models() if m.ids and not m.shape())
    assert known_model(unshaped.ids[0]).cite("hidden_size") is None


def _table(tmp_path: Path, **entry: object) -> Path:
    base = {"ids": ["org/m"], "source": "test"}
    path = tmp_path / "known.json"
    path.write_text(json.dumps({"models": [{**base, **entry}]}), encoding="utf-8")
    return path


CITE = "owner/repo@" + "a" * 40 + ":config.json"


@pytest.mark.parametrize(
    "entry, why",
    [
        ({"hidden_size": 4096}, "shape values without a source"),
        ({"hidden_size": 4096, "sources": [{"cite": CITE, "fields": ["head_dim"]}]}, "no value"),
        (
            {
                "hidden_size": 1,
                "sources": [
                    {"cite": CITE, "fields": ["hidden_size"]},
                    {"cite": CITE, "fields": ["hidden_size"]},
                ],
            },
            "cited twice",
        ),
        ({"vocab": 1, "sources": [{"cite": CITE, "fields": ["vocab"]}]}, "unknown fields"),
        (
            {
                "quantization": "fp8",
                "weight_block_size": [128],
                "sources": [{"cite": CITE, "fields": ["weight_block_size"]}],
            },
            "[n, k]",
        ),
    ],
)
def test_the_loader_refuses_uncited_or_malformed_shapes(
    tmp_path: Path, entry: dict, why: str
) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        known_models(_table(tmp_path, **entry))
    assert why in str(err.value)


def test_a_cited_entry_loads(tmp_path: Path) -> None:
    path = _table(
        tmp_path,
        quantization="fp8",
        moe_intermediate_size=1536,
        weight_block_size=[128, 128],
        sources=[
            {
                "cite": CITE,
                "fields": ["moe_intermediate_size", "weight_block_size"],
                "note": "a copy",
            }
        ],
    )
    m = known_model("org/m", path)
    assert m is not None and m.shape() == {
        "moe_intermediate_size": 1536,
        "weight_block_size": [128, 128],
    }
    assert m.cite("weight_block_size") == f"{CITE} (a copy)"


def test_the_data_file_is_the_default() -> None:
    assert known_models() == known_models(DATA_FILE)
