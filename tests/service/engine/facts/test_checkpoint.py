"""Checkpoint facts: config.json in a local folder or the HF cache, the known-model table,
and how they reach the evaluator and ``TriageResult.model_facts``."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from evals.render import render_log
from service.engine.evaluate.path_condition import prepared_pieces
from service.engine.expr.interpreter import Env, evaluate
from service.engine.facts import checkpoint as ck
from service.engine.facts.checkpoint import (
    MAX_CONFIG_BYTES,
    checkpoint_facts,
    checkpoint_info,
    fact_rows,
    flag_value,
)
from service.engine.logparse.parse import parse_log
from service.engine.triage import Engine

MLA_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "kv_lora_rank": 512,
    "q_lora_rank": 1536, "num_hidden_layers": 61, "n_routed_experts": 384,
    "num_attention_heads": 64, "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
    "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"},
}  # fmt: skip
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any socket connection fails the test; the HF cache is an empty temp folder."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))


def _model_dir(root: Path, name: str, config: dict | str | bytes) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    data = config if isinstance(config, str | bytes) else json.dumps(config)
    (folder / "config.json").write_bytes(data.encode() if isinstance(data, str) else data)
    return folder


def test_local_config_gives_facts(tmp_path: Path) -> None:
    folder = _model_dir(tmp_path, "my-kimi", MLA_CONFIG)
    info = checkpoint_info(str(folder))
    assert info is not None and info.source == "config.json"
    assert info.detail == str(folder / "config.json")
    assert (info.architectures, info.quantization, info.mla) == (
        ["DeepseekV3ForCausalLM"],
        "compressed-tensors",
        True,
    )
    assert "auto_map" not in info.hf_config  # only whitelisted fields are kept
    facts = checkpoint_facts(info)
    assert facts["model_arch"].value == "DeepseekV3ForCausalLM"
    assert facts["get_model_config().quantization"].value == "compressed-tensors"
    assert facts["use_mla_backend()"].value is True and facts["use_mla_backend(args)"].value is True
    prov = facts["use_mla_backend()"].provenance
    assert prov.kind == "fact" and str(folder / "config.json") in prov.detail
    env = Env({}, facts=facts)
    assert evaluate("self.get_model_config().hf_config.kv_lora_rank == 512", env).truth is True
    assert evaluate("model_config_of(args).hf_config.model_type == 'kimi_k2'", env).truth is True
    rows = {r.name: r for r in fact_rows(info)}
    assert rows["num_experts"].value == 384 and rows["num_hidden_layers"].value == 61
    assert rows["dsa_indexer"].value is False  # DeepSeek-V3 layout without index_topk


def test_hf_quant_config_json_is_read_for_modelopt(tmp_path: Path) -> None:
    folder = _model_dir(tmp_path, "llama-fp4", LLAMA_CONFIG)
    (folder / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}})
    )
    assert checkpoint_info(str(folder)).quantization == "modelopt_fp4"


def test_hf_cache_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hub"
    repo = cache / "models--acme--Tiny-MLA"
    _model_dir(repo / "snapshots", "0" * 40, {**MLA_CONFIG, "model_type": "old"})
    _model_dir(repo / "snapshots", "a" * 40, MLA_CONFIG)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    info = checkpoint_info("acme/Tiny-MLA")
    assert info is not None and info.source == "hf_cache"
    assert info.detail.endswith(f"{'a' * 40}/config.json")
    assert info.hf_config["model_type"] == "kimi_k2" and info.mla is True
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # HF_HOME/hub is the same folder
    assert checkpoint_info("acme/Tiny-MLA").source == "hf_cache"


def test_known_public_id(tmp_path: Path) -> None:
    info = checkpoint_info("moonshotai/Kimi-K2-Thinking")
    assert info is not None and info.source == "known_model"
    assert "moonshotai/Kimi-K2-Thinking" in info.detail
    facts = checkpoint_facts(info)
    assert facts["checkpoint_quantization"].value == "compressed-tensors"
    assert facts["use_mla_backend()"].value is True
    llama = checkpoint_facts(checkpoint_info("meta-llama/Llama-3.1-8B-Instruct"))
    assert llama["use_mla_backend()"].value is False
    assert llama["get_model_config().quantization"].value is None  # no quantization
    # a local copy named like the repo, absent here: matched by its folder name
    assert checkpoint_info("/nowhere/Kimi-K2-Instruct").quantization == "fp8"
    # a cache path names its repo
    cached = checkpoint_info("/x/hub/models--openai--gpt-oss-20b/snapshots/abc")
    assert cached is not None and cached.quantization == "mxfp4"
    assert checkpoint_info("acme/unknown-model") is None
    assert checkpoint_info("relative/../../etc") is None


def test_user_quantization_flag_wins() -> None:
    info = checkpoint_info("deepseek-ai/DeepSeek-V3")
    facts = checkpoint_facts(info, user_quantization="w8a8_int8")
    assert "get_model_config().quantization" not in facts  # left to the flag
    assert facts["checkpoint_quantization"].value == "fp8"  # the clash stays visible
    assert "quantization" not in facts["model_config_of(args)"].value
    argv = ["--model-path", "m", "--quantization", "fp8", "--quantization=awq"]
    assert (
        flag_value(argv, "--quantization") == "awq" and flag_value(["x"], "--quantization") is None
    )


@pytest.mark.parametrize("content", [
    "{not json", "[1, 2, 3]", b"\xff\xfe\x00garbage", "[" * 100_000 + "]" * 100_000,
])  # fmt: skip
def test_invalid_config_is_ignored_with_a_note(tmp_path: Path, content: str | bytes) -> None:
    folder = _model_dir(tmp_path, "broken", content)
    info = checkpoint_info(str(folder))
    assert info is not None and not info.architectures and info.quantization is None
    assert info.notes and str(folder / "config.json") in info.notes[0]
    assert checkpoint_facts(info) == {}


def test_huge_config_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _model_dir(
        tmp_path, "Kimi-K2-Thinking", {**LLAMA_CONFIG, "pad": "x" * (MAX_CONFIG_BYTES + 10)}
    )
    monkeypatch.setattr(ck, "_parse", lambda *a: pytest.fail("an oversized file was parsed"))
    info = checkpoint_info(str(folder))
    # skipped with a note; the folder name still finds the public model's table entry
    assert info is not None and info.source == "known_model"
    assert any("not read" in n for n in info.notes)


def test_engine_facts_prefer_config_over_the_name_guess(kb, tmp_path: Path) -> None:
    folder = _model_dir(tmp_path, "Llama-3.1-8B-renamed", MLA_CONFIG)
    parsed = parse_log(f"$ python -m sglang.launch_server --model-path {folder}\nValueError: x\n")
    facts, _, arch = Engine(kb).facts_for(parsed, "h100-x8", None, None)
    assert arch == "DeepseekV3ForCausalLM" and facts["use_mla_backend()"].value is True
    # an explicit model_arch from the request still wins for the architecture
    facts, _, arch = Engine(kb).facts_for(parsed, "h100-x8", None, "LlamaForCausalLM")
    assert arch == "LlamaForCausalLM" and facts["model_arch"].value == "LlamaForCausalLM"
    assert facts["model_config_of(args)"].value["hf_config"]["architectures"] == [
        "LlamaForCausalLM"
    ]


def _mla_check(store, release: str) -> tuple[dict, str]:
    """A check of ``release`` whose path condition reads the MLA fact (found by what it reads)."""
    facts = checkpoint_facts(checkpoint_info("deepseek-ai/DeepSeek-V3"))
    mla_keys = next(
        r.keys for r in fact_rows(checkpoint_info("deepseek-ai/DeepSeek-V3")) if r.name == "mla"
    )
    for check in store.checks(release, path="sglang/srt/server_args.py"):
        if check.kind != "assert":
            continue
        texts, _ = prepared_pieces(store, release, check, frozenset(facts))
        for role, text, _, _ in texts:
            if role != "guard":
                continue
            for key in mla_keys:
                if key in text:
                    return check, key
    pytest.skip(f"no check of {release} reads the MLA fact")


def test_triage_reads_the_checkpoint_mla_fact(kb, store, tmp_path: Path) -> None:
    check, key = _mla_check(store, "0.5.11")
    engine = Engine(kb)
    results = {}
    for name, config in (("mla", MLA_CONFIG), ("mha", LLAMA_CONFIG)):
        folder = _model_dir(tmp_path, f"model-{name}", config)
        log = render_log(store, "0.5.11", check, argv=["--model-path", str(folder), "--tp", "8"])
        results[name] = engine.triage(log, release="0.5.11", hardware="b200-x8")
    seen = {}
    for name, result in results.items():
        assert result.status == "located" and result.check.id == check.id
        inputs = [i for a in result.evaluation.atoms for i in a.inputs if i.name == key]
        assert inputs, f"the condition did not read {key}"
        assert inputs[0].source == "fact" and "config.json" in inputs[0].detail
        seen[name] = (
            inputs[0].value,
            [a.value for a in result.evaluation.atoms if any(i.name == key for i in a.inputs)],
        )
        mla = next(f for f in result.model_facts if f.name == "mla")
        assert mla.used and mla.source == "config.json" and mla.detail.endswith("config.json")
        assert mla.value is (name == "mla")
        assert all(not f.used for f in result.model_facts if f.name == "num_experts")
    assert seen["mla"][0] is True and seen["mha"][0] is False
    assert seen["mla"][1] != seen["mha"][1]  # the fact changed the atom's truth
