"""Start-up probes: replay past argument validation into the located check's own code.

Real replays of 0.5.11 and 0.5.23 in the sandbox (the warm pool's worker per release, as
``test_replay.py``), a Qwen3-30B-A3B-shaped MoE checkpoint made FP8 block-quantized by its
model facts. Each release's own check refuses the command and the same command with a
fixed ``--ep-size``/``--tp`` passes; ``MoeRunner`` refuses an unregistered runner x a2a
pair and accepts a registered one. Plus the pure pieces (facts, sizes, routing).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kb.errors import ConfigError
from kb.sources import ReleaseSource
from service.engine import Engine
from service.replay import ReplayResult, StartupProbe, probe_for_location, replay_startup
from service.replay.child.probe_moe import is_check_line
from service.replay.child.probe_state import parallel_sizes
from service.replay.fix_search import search_fixes
from service.replay.model_configs import MODEL_CONFIGS, config_with_facts
from service.replay.probes import startup_request
from service.settings import Settings

QWEN = "Qwen3MoeForCausalLM"
FP8 = {
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }
}
#: block_k 256: (768 / 2) passes the block_n check but not create_weights' block_k one
FP8_K256 = {"quantization_config": {**FP8["quantization_config"], "weight_block_size": [128, 256]}}
MODEL = ["--model-path", "Qwen/Qwen3-30B-A3B-FP8"]
TP8 = [*MODEL, "--tp", "8"]
TP8_EP8 = [*TP8, "--ep-size", "8"]
TP2 = [*MODEL, "--tp", "2"]
DEEPEP = [*TP8_EP8, "--moe-a2a-backend", "deepep"]
TRT = ["--moe-runner-backend", "flashinfer_trtllm"]
DEEPEP_TRT = [*DEEPEP, *TRT]
TP2_TRT = [*TP2, *TRT]
HW = "rtx-pro-6000-x8"


@pytest.fixture(scope="module")
def probed(
    sglang_source: Callable[[str], ReleaseSource], cache_settings: Settings
) -> dict[str, list[ReplayResult]]:
    """Every replay of this module: per release, three probe calls on one warm worker."""
    out: dict[str, list[ReplayResult]] = {}
    for version in ("0.5.11", "0.5.23"):
        root = sglang_source(version).root

        def run(
            argvs: list[list[str]],
            probe: StartupProbe,
            facts: dict,
            _root: Path = root,
            _version: str = version,
        ) -> list[ReplayResult]:
            return replay_startup(
                cache_settings,
                _version,
                HW,
                argvs,
                probe=probe,
                model_arch=QWEN,
                model_facts=facts,
                release_root=_root,
                timeout_s=240,
                job_timeout_s=90,
            )

        block = StartupProbe(family="moe_block_shape")
        out[f"{version}/block"] = run([TP8, TP8_EP8, TP2], block, FP8)
        out[f"{version}/block_k"] = run([TP2], block, FP8_K256)
        out[f"{version}/unquantized"] = run([TP8], block, {})
        layer = StartupProbe(family="moe_runner_a2a")
        direct = StartupProbe(family="moe_runner_a2a", runner_backend="flashinfer_trtllm")
        out[f"{version}/runner"] = run([DEEPEP_TRT, TP2_TRT, DEEPEP], layer, FP8) + run(
            [DEEPEP], direct, FP8
        )
    return out


def _refused(result: ReplayResult, path: str, function: str) -> None:
    assert result.status == "raised", result.summary() + "\n" + result.log_tail
    assert result.phase == "probe"
    assert result.origin is not None and result.origin.path == path, result.location
    assert result.origin.function == function
    assert result.origin.code.startswith("raise")
    assert all(f.path.startswith("sglang/") for f in result.frames)


COMPAT = {
    "0.5.11": ("sglang/srt/model_executor/model_runner.py", "check_quantized_moe_compatibility"),
    "0.5.23": (
        "sglang/srt/model_executor/model_runner_components/moe_ep_setup.py",
        "check_quantized_moe_compatibility",
    ),
}
WEIGHTS = {"0.5.11": "create_weights", "0.5.23": "create_fp8_moe_weight_"}


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_block_shape_refused_then_fixed(
    probed: dict[str, list[ReplayResult]], version: str
) -> None:
    tp8, ep8, tp2 = probed[f"{version}/block"]
    _refused(tp8, *COMPAT[version])
    assert tp8.exception_type == "ValueError"
    assert "(moe_intermediate_size=768 / moe_tp_size=8) % weight_block_size_n=128" in (
        tp8.message or ""
    )
    assert tp8.startup is not None and tp8.startup["sizes"]["moe_tp_size"] == 8
    assert "Qwen/Qwen3-30B-A3B-FP8" not in tp8.effective_argv
    assert any("model facts laid over" in n for n in tp8.substitutions)
    for fixed, per_partition, local in ((ep8, 768, 16), (tp2, 384, 128)):
        assert fixed.status == "passed", fixed.summary() + "\n" + fixed.log_tail
        report = fixed.startup or {}
        assert any(step.startswith("FusedMoE") for step in report["steps"]), report
        assert report["values"]["intermediate_size_per_partition"] == per_partition
        assert report["values"]["num_local_experts"] == local
        assert report["values"]["quant_method"] == "Fp8MoEMethod"
        assert report["values"]["weight_block_size"] == [128, 128]


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_create_weights_own_check(probed: dict[str, list[ReplayResult]], version: str) -> None:
    """The compatibility check passes (384 % 128) and the MoE method's create_weights,
    reached through FusedMoE, refuses block_k 256."""
    (result,) = probed[f"{version}/block_k"]
    _refused(result, "sglang/srt/layers/quantization/fp8.py", WEIGHTS[version])
    assert "384 is not divisible by weight quantization block_k = 256" in (result.message or "")
    assert any(
        f.function == "__init__" and f.path.endswith("fused_moe_triton/layer.py")
        for f in result.frames
    )
    assert (
        "moe_ep_setup.check_quantized_moe_compatibility" in result.startup["steps"]
        or "ModelRunner.check_quantized_moe_compatibility" in result.startup["steps"]
    )


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_runner_a2a_registry(probed: dict[str, list[ReplayResult]], version: str) -> None:
    """The MoE layer the model builds (DeepEPMoE for deepep) has its quant method construct
    MoeRunner: no fused func for (deepep, flashinfer_trtllm); (none, flashinfer_trtllm) is
    registered."""
    deepep_trt, tp2_trt, deepep_auto, direct = probed[f"{version}/runner"]
    for refused in (deepep_trt, direct):
        _refused(refused, "sglang/srt/layers/moe/moe_runner/runner.py", "__init__")
        assert refused.exception_type == "NotImplementedError"
        assert "requires a fused func for a2a backend deepep, but none is registered" in (
            refused.message or ""
        )
        values = (refused.startup or {})["values"]
        assert values["a2a_backend"] == "deepep" and values["unimportable"] == {}
        assert "sglang.srt.layers.moe.moe_runner.flashinfer_trtllm" in values["registering_modules"]
    assert (deepep_trt.startup or {})["steps"][-1] == "DeepEPMoE(...) on the meta device"
    assert any(f.function == "create_moe_runner" for f in deepep_trt.frames)
    assert tp2_trt.status == "passed", tp2_trt.summary() + "\n" + tp2_trt.log_tail
    values = (tp2_trt.startup or {})["values"]
    assert values["a2a_backend"] == "none" and values["layer"] == "FusedMoE"
    assert values["runner_backend"] == "flashinfer_trtllm"
    assert values["fused_func"] == "fused_experts_none_to_flashinfer_trtllm"
    # DeepEPMoE with the runner left to the quant method goes on to the expert-parallel
    # group, which only a launched server builds: not reached, never a verdict
    assert deepep_auto.status == "harness_error" and deepep_auto.phase == "probe"
    assert "could not be built here" in (deepep_auto.harness_reason or "")


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_check_that_does_not_apply_is_not_a_verdict(
    probed: dict[str, list[ReplayResult]], version: str
) -> None:
    """The BF16 stand-in has no quantization: the block-shape probe says it reached no
    check (a fix must not be 'verified' by a stand-in that lacks the checkpoint's facts)."""
    (result,) = probed[f"{version}/unquantized"]
    assert result.status == "harness_error" and result.phase == "probe", result.summary()
    assert "no quantization" in (result.harness_reason or "")
    assert (result.startup or {})["values"]["quantization"] is None


def test_validation_refusal_stops_before_the_probe(
    sglang_source: Callable[[str], ReleaseSource], cache_settings: Settings
) -> None:
    (result,) = replay_startup(
        cache_settings,
        "0.5.11",
        HW,
        [[*TP8, "--no-such-flag"]],
        probe=StartupProbe(family="moe_block_shape"),
        model_arch=QWEN,
        model_facts=FP8,
        release_root=sglang_source("0.5.11").root,
        timeout_s=240,
    )
    assert result.status == "argparse_error"
    assert result.startup is None


def test_config_with_facts() -> None:
    cfg = config_with_facts(QWEN, {**FP8, "moe_intermediate_size": 1536, "rope_scaling": None})
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128]
    assert cfg["moe_intermediate_size"] == 1536 and "rope_scaling" not in cfg
    assert "quantization_config" not in MODEL_CONFIGS[QWEN]  # the stand-in is untouched
    kimi = config_with_facts("KimiK25ForConditionalGeneration", {**FP8, "n_routed_experts": 8})
    assert kimi["text_config"]["n_routed_experts"] == 8 and "quantization_config" in kimi
    for bad in (
        {"auto_map": {"AutoConfig": "x.Y"}},
        {"architectures": ["X"]},
        {"not an identifier": 1},
        {"big": "x" * 5000},
    ):
        with pytest.raises(ConfigError):
            config_with_facts(QWEN, bad)
    with pytest.raises(ConfigError):
        config_with_facts("NoSuchForCausalLM", {})


def test_parallel_sizes_and_routing() -> None:
    assert parallel_sizes({"tp_size": 8, "ep_size": 2}) == {
        "tp_size": 8,
        "moe_ep_size": 2,
        "moe_dp_size": 1,
        "moe_tp_size": 4,
    }
    assert parallel_sizes({"tp_size": 16, "ep_size": 1, "moe_dp_size": 2})["moe_tp_size"] == 8
    assert parallel_sizes({})["tp_size"] == 1
    block = probe_for_location(
        "sglang/srt/model_executor/model_runner_components/moe_ep_setup.py",
        "check_quantized_moe_compatibility",
    )
    assert block is not None and block.family == "moe_block_shape"
    runner = probe_for_location("sglang/srt/layers/moe/moe_runner/runner.py", "__init__")
    assert runner is not None and runner.family == "moe_runner_a2a"
    assert probe_for_location("sglang/srt/server_args.py", "_handle_moe_kernel_config") is None
    with pytest.raises(ValueError):
        StartupProbe(family="moe_runner_a2a", runner_backend="x; rm -rf /")


def test_only_a_check_line_is_a_verdict() -> None:
    frame = {
        "kind": "sglang",
        "path": "sglang/srt/layers/quantization/fp8.py",
        "code": "raise ValueError(",
    }
    assert is_check_line(frame)
    assert is_check_line({**frame, "code": "assert self.block_quant"})
    assert not is_check_line({**frame, "code": "tp_size = layer.moe_tp_size"})
    assert not is_check_line({**frame, "path": "sglang/srt/runtime_context.py"})
    assert not is_check_line({**frame, "kind": "harness"})
    assert not is_check_line(None)


#: a start-up crash of 0.5.11 past validation (the scheduler's model runner)
CRASH = """Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2755, in run_scheduler_process
    scheduler = Scheduler(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 331, in __init__
    self.check_quantized_moe_compatibility()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1095, in check_quantized_moe_compatibility
    raise ValueError(
ValueError: For quantized MoE models, please make sure (moe_intermediate_size=768 / moe_tp_size=8) % weight_block_size_n=128 == 0 where moe_tp_size is equal to tp_size (8) divided by ep_size (1). You can fix this by setting arguments `--tp` and `--ep` correctly.
"""


def _flag(argv: list[str], names: tuple[str, ...], default: int) -> int:
    values = [int(argv[i + 1]) for i, tok in enumerate(argv[:-1]) if tok in names]
    return values[-1] if values else default


def test_fix_search_carries_the_probe_verdict(kb, cache_settings: Settings) -> None:
    """The engine's fixes for the located block-shape check are replayed into the check's
    own code with the facts the crash printed: each verdict agrees with the check's
    arithmetic on that fix's flags."""
    result = Engine(kb).triage(
        {
            "log": CRASH,
            "command": "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B-FP8 --tp 8",
        },
        hardware=HW,
        model_arch=QWEN,
        model="Qwen/Qwen3-30B-A3B-FP8",
        release="0.5.11",
    )
    assert result.status == "located" and result.fixes
    request = startup_request(result)
    assert request is not None
    probe, facts = request
    assert probe.family == "moe_block_shape"
    assert facts["moe_intermediate_size"] == 768
    assert facts["quantization_config"]["weight_block_size"] == [128, 128]
    result = search_fixes(result, cache_settings, deadline_s=600, force=True, max_candidates=5)
    decided = 0
    for fix in [f for f in result.fixes if f.replay]:
        tp = _flag(fix.argv, ("--tp", "--tp-size", "--tensor-parallel-size"), 1)
        ep = _flag(fix.argv, ("--ep", "--ep-size", "--expert-parallel-size"), 1)
        ok = tp % ep == 0 and 768 % (tp // ep) == 0 and (768 // (tp // ep)) % 128 == 0
        status = (fix.replay or {}).get("status")
        assert status == ("verified" if ok else "next_failure"), (fix.argv, fix.replay)
        if not ok:
            assert "check_quantized_moe_compatibility" in (fix.replay or {}).get("location", "")
        decided += 1
    assert decided and (result.fix_search.status if result.fix_search else None) in (
        "verified",
        "rejected",
    )
