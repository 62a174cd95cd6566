"""Model shape facts: from the known-model table (cited), from a local ``config.json``, and
from what SGLang printed while it started; and a quantized-MoE block-shape crash that
printed no numbers, decided and fixed from the model facts alone."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kb.code_types import Check
from kb.known_models import known_models
from service.engine.expr.interpreter import Env, evaluate, fact_key
from service.engine.facts.checkpoint import SHAPE_INTS, checkpoint_facts, checkpoint_info, fact_rows
from service.engine.facts.from_log import (
    log_lines,
    log_model_facts,
    model_fields_from_log,
)
from service.engine.triage import Engine

MESSAGE_START = "For quantized MoE models, please make sure"
TPS = (2, 4, 8, 16, 32, 64)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any socket connection fails the test; the HF cache is an empty temp folder."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))


def _block_models() -> list:
    """Table entries with what the block-shape check reads (a quantized MoE)."""
    return [m for m in known_models() if m.ids and m.moe_intermediate_size and m.weight_block_size]


# ---------------------------------------------------------------------- the known-model table


@pytest.mark.parametrize(
    "entry", [m for m in known_models() if m.ids and m.shape()], ids=lambda m: m.label()
)
def test_table_shapes_become_cited_facts(entry) -> None:
    info = checkpoint_info(entry.ids[0])
    assert info is not None and info.source == "known_model"
    rows = {r.name: r for r in fact_rows(info)}
    facts = checkpoint_facts(info)
    for name, value in entry.shape().items():
        row = rows[name]
        assert row.value == value
        assert row.detail == f"known model {entry.ids[0]}: {entry.cite(name)}"
        for key in row.keys:  # each key the fact feeds says where the value was read
            assert f"known model {entry.ids[0]}: " in facts[key].provenance.detail
    for name in SHAPE_INTS:
        if name in entry.shape():
            root = "model_config.hf_text_config"
            assert facts[f"{root}.{name}"].value == entry.shape()[name]


@pytest.mark.parametrize("entry", _block_models(), ids=lambda m: m.label())
def test_block_shape_names_sglang_reads(entry) -> None:
    facts = checkpoint_facts(checkpoint_info(entry.ids[0]))
    size, (n, _) = entry.moe_intermediate_size, entry.weight_block_size
    # check_quantized_moe_compatibility's locals and the hf_text_config read behind them
    assert facts["moe_intermediate_size"].value == size
    assert facts["weight_block_size_n"].value == n
    read = "getattr(model_config.hf_text_config, 'moe_intermediate_size', None) // 2"
    assert evaluate(read, Env({}, facts)).value == size // 2
    assert (
        facts["model_config_of(args)"].value["hf_config"]["quantization_config"][
            "weight_block_size"
        ]
        == entry.weight_block_size
    )


def test_a_user_quantization_keeps_the_block_off_the_method_key() -> None:
    entry = _block_models()[0]
    info = checkpoint_info(entry.ids[0])
    keys = {k for r in fact_rows(info, "w4afp8") for k in r.keys}
    assert "quant_config.weight_block_size" not in keys and "weight_block_size_n" in keys
    keys = {k for r in fact_rows(info) for k in r.keys}
    assert "quant_config.weight_block_size" in keys


# ----------------------------------------------------------------------- a local config.json

VL_CONFIG = {  # a vision-language MoE: the text shape nests in text_config
    "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
    "vision_config": {"model_type": "qwen3_vl", "depth": 27, "hidden_size": 1152},
    "text_config": {
        "hidden_size": 2048, "moe_intermediate_size": 768, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 8, "full_attention_interval": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
        + ["full_attention"],
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    },
    "auto_map": {"AutoConfig": "remote.Code"},
}  # fmt: skip


def test_local_config_json_gives_the_shape(tmp_path: Path) -> None:
    folder = tmp_path / "my-vl-moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(VL_CONFIG), encoding="utf-8")
    info = checkpoint_info(str(folder))
    assert info is not None and info.source == "config.json"
    rows = {r.name: r for r in fact_rows(info)}
    text = VL_CONFIG["text_config"]
    for name in (
        "hidden_size",
        "moe_intermediate_size",
        "num_key_value_heads",
        "head_dim",
        "num_experts_per_tok",
        "full_attention_interval",
    ):
        assert rows[name].value == text[name]
        assert rows[name].detail == str(folder / "config.json")
        # nested: the text config's chains, never the top-level hf_config's
        assert "model_config.hf_text_config." + name in rows[name].keys
        assert not any(k.startswith("model_config.hf_config.") for k in rows[name].keys)
    assert rows["weight_block_size"].value == [128, 128]
    assert rows["weight_block_size_n"].value == 128
    assert rows["layer_types"].value == {"linear_attention": 6, "full_attention": 2}
    assert (rows["has_vision"].value, rows["vision_model_type"].value) == (True, "qwen3_vl")
    facts = checkpoint_facts(info)
    assert facts["moe_intermediate_size"].value == 768
    assert str(folder / "config.json") in facts["moe_intermediate_size"].provenance.detail
    # only what the facts say of the tower is kept; remote code is never named
    assert info.hf_config["vision_config"] == {"model_type": "qwen3_vl"}
    assert "auto_map" not in info.hf_config


# ------------------------------------------------------------------- printed in the start-up log

LOG = """\
[2026-03-23 14:01:02 TP0] Load weight begin. avail mem=78.50 GB
[2026-03-23 14:02:38 TP0] Load weight end. elapsed=96.12 s, type=DeepseekV3ForCausalLM, \
quant=fp8, fmt=e4m3, avail mem=12.30 GB, mem usage=66.20 GB.
[2026-03-23 14:02:40 TP0] max_total_num_tokens=455321, chunked_prefill_size=8192, \
max_prefill_tokens=16384, max_running_requests=2048, context_len=163840, \
available_gpu_mem=4.10 GB
"""


def test_model_fields_printed_in_the_log() -> None:
    fields = {f.name: f for f in model_fields_from_log(LOG.splitlines())}
    assert {n: f.value for n, f in fields.items()} == {
        "loaded_model_class": "DeepseekV3ForCausalLM",
        "quantization": "fp8",
        "max_total_num_tokens": 455321,
        "context_len": 163840,
    }
    assert "Load weight end." in fields["quantization"].evidence
    facts = log_model_facts(list(fields.values()))
    ctx = facts[fact_key("self.model_config.context_len")]
    assert ctx.value == 163840 and "printed in the log" in ctx.provenance.detail
    assert facts["checkpoint_quantization"].value == "fp8"


def test_the_last_start_up_wins_and_garbage_is_ignored() -> None:
    again = LOG.replace("context_len=163840", "context_len=32768").replace(
        "type=Deepseek", "type=x;rm Deepseek"
    )
    fields = {f.name: f.value for f in model_fields_from_log((LOG + again).splitlines())}
    assert fields["context_len"] == 32768
    assert fields["loaded_model_class"] == "DeepseekV3ForCausalLM"  # "x;rm ..." is no class name
    assert model_fields_from_log(["context_len=12", "Load weight end. type="]) == []
    modelopt = LOG.replace("quant=fp8, fmt=e4m3", "quant=modelopt, quant_algo=NVFP4")
    fields = {f.name: f.value for f in model_fields_from_log(modelopt.splitlines())}
    assert fields["quantization"] == "modelopt_fp4"  # as SGLang's ModelConfig names it
    report = json.dumps({"log": LOG, "release": "0.5.23"})
    assert len(model_fields_from_log(log_lines(report))) == 4
    assert len(model_fields_from_log(log_lines(LOG.encode()))) == 4


# ------------------------------------------------- a block-shape crash that printed no numbers


def _check(store, release: str) -> Check:
    rows = [c for c in store.checks(release) if (c.message or "").startswith(f'f"{MESSAGE_START}')]
    assert len(rows) == 1, (release, len(rows))
    return rows[0]


def _failing_tp(size: int, block: int) -> int:
    """The smallest --tp (with --ep 1) that passes the divisibility check and fails the
    block one, by SGLang's own arithmetic."""
    return next(tp for tp in TPS if size % tp == 0 and (size // tp) % block != 0)


def _layout(argv: list[str]) -> tuple[int, int, int]:
    values = {"tp": 1, "ep": 1, "dp": 1}
    names = {
        "--tp": "tp",
        "--tp-size": "tp",
        "--tensor-parallel-size": "tp",
        "--ep": "ep",
        "--ep-size": "ep",
        "--expert-parallel-size": "ep",
        "--moe-dp-size": "dp",
    }
    for i, arg in enumerate(argv[:-1]):
        if arg in names:
            values[names[arg]] = int(argv[i + 1])
    return values["tp"], values["ep"], values["dp"]


def _holds(size: int, block: int, tp: int, ep: int, dp: int) -> bool:
    if tp % ep:
        return False
    moe_tp = tp // ep // dp
    return moe_tp > 0 and size % moe_tp == 0 and (size // moe_tp) % block == 0


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


@pytest.mark.parametrize("release", ["0.5.11", "0.5.23"])
@pytest.mark.parametrize("entry", _block_models(), ids=lambda m: m.label())
def test_block_shape_decided_from_model_facts(engine, kb, release, entry) -> None:
    check = _check(kb.store, release)
    size, block = entry.moe_intermediate_size, entry.weight_block_size[0]
    tp = _failing_tp(size, block)
    model = entry.ids[0]
    fn = check.function.rpartition(".")[2]
    # the traceback ends at the raise; the message itself was cut off (no numbers printed)
    log = (
        f"$ python -m sglang.launch_server --model-path {model} --tp {tp}\n"
        + LOG
        + "Traceback (most recent call last):\n"
        f'  File "/usr/local/lib/python3.12/dist-packages/{check.path}", '
        f"line {check.start_line}, in {fn}\n    raise ValueError(\nValueError\n"
    )
    result = engine.triage(log, release=release)
    assert result.status == "located"
    assert (result.location.path, result.location.start_line) == (
        check.path,
        check.start_line,
    )
    assert result.printed == []  # nothing came from the message
    facts = {f.name: f for f in result.model_facts}
    assert facts["moe_intermediate_size"].value == size and facts["moe_intermediate_size"].used
    assert facts["moe_intermediate_size"].source == "known_model"
    assert facts["weight_block_size_n"].used
    assert facts["context_len"].source == "log" and facts["context_len"].value == 163840
    # the check's own arithmetic is decided from the model: it holds with the user's flags
    assert (
        result.arithmetic
        and f"moe_intermediate_size {size} // {tp} = {size // tp}" in result.arithmetic
    )
    assert not any(
        u.what.startswith("getattr(model_config.hf_text_config") for u in result.unknowns
    )
    best = next(f for f in result.fixes if f.recommended)
    assert best.fixes_check == "true"
    assert _holds(size, block, *_layout(best.argv)), best.command
    assert _layout(best.argv)[0] == tp, "the user's --tp is kept while another layout works"
