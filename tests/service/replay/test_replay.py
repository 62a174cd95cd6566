"""End-to-end replays of real releases (0.4.10.post2, 0.5.9, 0.5.11, 0.5.23) in the isolated
subprocess.

Command lines of one release and one machine share a subprocess
(``replay_many``), so the suite pays for importing torch and SGLang five
times. Results are cached in ``<home>/replay-cache`` by a key that includes
the harness code, so a rerun with unchanged code takes seconds.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kb.sources import ReleaseSource
from service.replay import ReplayResult, batches, launch, replay, replay_many
from service.replay.harness import _cache_path
from service.settings import Settings

DSV3, KIMI, LLAMA = "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration", "LlamaForCausalLM"
SEED = ["--model-path", "moonshotai/Kimi-K2.5", "--tp", "8",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "lmsys/SGLang-EAGLE3-Kimi-K2.5",
        "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]  # fmt: skip
FIX = SEED[:8]  # the topk and draft-token flags dropped
TRTLLM = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "8",
          "--attention-backend", "trtllm_mha"]  # fmt: skip
BAD_FLAG = ["--model-path", "m", "--tp", "8", "--no-such-flag"]
#: refused by check_server_args, which the launch calls after ServerArgs is built
BASE_GPU = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--base-gpu-id", "-1"]
PLAIN = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2"]


@pytest.fixture(scope="module")
def runs(
    sglang_source: Callable[[str], ReleaseSource], cache_settings: Settings
) -> dict[str, list[ReplayResult]]:
    """Every replay of this module, batched by (release, hardware)."""

    def batch(version: str, hardware: str, jobs: list[tuple[list[str], str]]) -> list[ReplayResult]:
        return replay_many(
            sglang_source(version).root,
            version,
            [argv for argv, _ in jobs],
            hardware=hardware,
            model_arch=[arch for _, arch in jobs],
            timeout_s=120,
            job_timeout_s=60,
            settings=cache_settings,
        )

    return {
        "0.5.11/rtx": batch(
            "0.5.11",
            "rtx-pro-6000-x8",
            [(SEED, DSV3), (SEED, KIMI), (FIX, DSV3), (TRTLLM, LLAMA), (BAD_FLAG, LLAMA)],
        ),
        "0.5.11/b200": batch("0.5.11", "b200-x8", [(TRTLLM, LLAMA)]),
        "0.5.23/rtx": batch("0.5.23", "rtx-pro-6000-x8", [(SEED, DSV3), (FIX, DSV3)]),
        "0.5.9/rtx": batch(
            "0.5.9", "rtx-pro-6000-x8", [(SEED, DSV3), (FIX, DSV3), (BASE_GPU, LLAMA)]
        ),
        "0.4.10/h100": batch("0.4.10.post2", "h100-x8", [(PLAIN, LLAMA), (BASE_GPU, LLAMA)]),
    }


def _assert_raised_in(
    result: ReplayResult, path: str, function: str, lines: range | None = None
) -> None:
    assert result.status == "raised", result.summary() + "\n" + result.log_tail
    assert result.origin is not None
    assert result.origin.path == path
    assert result.origin.function == function
    if lines is not None:
        assert result.origin.line in lines
    assert result.frames[-1] == result.origin
    assert all(f.path.startswith("sglang/") for f in result.frames)


@pytest.mark.parametrize("index", [0, 1], ids=["deepseek-v3", "kimi-k2.5"])
def test_seed_reproduces_on_0_5_11(runs: dict[str, list[ReplayResult]], index: int) -> None:
    result = runs["0.5.11/rtx"][index]
    _assert_raised_in(
        result, "sglang/srt/server_args.py", "_handle_speculative_decoding", range(3519, 3523)
    )
    assert result.exception_type == "AssertionError"
    assert result.hardware == "rtx-pro-6000-x8"
    assert any("--model-path moonshotai/Kimi-K2.5 replaced" in n for n in result.substitutions)
    assert "moonshotai/Kimi-K2.5" not in result.effective_argv
    assert result.ran == "prepare_server_args"
    assert "validate_s" in result.timings  # measured (bench/replay_pool_bench.py keeps it)


def test_fix_passes_on_0_5_11(runs: dict[str, list[ReplayResult]]) -> None:
    result = runs["0.5.11/rtx"][2]
    assert result.status == "passed", result.summary()
    args = result.server_args or {}
    assert args["speculative_algorithm"] == "EAGLE3"
    assert args["tp_size"] == 8
    # SGLang chose the EAGLE defaults itself once topk/draft tokens were left out
    assert args["speculative_eagle_topk"] == 1
    assert args["speculative_num_steps"] == 3
    assert args["speculative_num_draft_tokens"] == 4
    assert result.probe_disagreements == {}


def test_trtllm_mha_depends_on_hardware(runs: dict[str, list[ReplayResult]]) -> None:
    on_rtx, on_b200 = runs["0.5.11/rtx"][3], runs["0.5.11/b200"][0]
    _assert_raised_in(
        on_rtx, "sglang/srt/server_args.py", "_handle_attention_backend_compatibility"
    )
    assert on_rtx.exception_type == "ValueError"
    assert "only supported on Blackwell GPUs (SM100)" in (on_rtx.message or "")
    assert on_b200.status == "passed", on_b200.summary()
    assert (on_b200.server_args or {})["attention_backend"] == "trtllm_mha"


def test_unknown_flag_is_an_argparse_error(runs: dict[str, list[ReplayResult]]) -> None:
    result = runs["0.5.11/rtx"][4]
    assert result.status == "argparse_error"
    assert "unrecognized arguments: --no-such-flag" in (result.message or "")
    assert "usage: sglang serve" in (result.usage or "")


def test_seed_on_0_5_23_fails_in_the_speculative_hook(runs: dict[str, list[ReplayResult]]) -> None:
    seed, fix = runs["0.5.23/rtx"]
    _assert_raised_in(seed, "sglang/srt/arg_groups/speculative_hook.py", "_handle_eagle_family")
    assert seed.exception_type == "AssertionError"
    assert seed.ran == "prepare_server_args + resolve_once"
    assert any(f.function == "run_resolution_pipeline" for f in seed.frames)
    assert fix.status == "passed", fix.summary()
    assert (fix.server_args or {})["speculative_eagle_topk"] == 1


def test_seed_on_0_5_9(runs: dict[str, list[ReplayResult]]) -> None:
    seed, fix, _ = runs["0.5.9/rtx"]
    _assert_raised_in(seed, "sglang/srt/server_args.py", "_handle_speculative_decoding")
    assert seed.exception_type == "AssertionError"
    assert fix.status == "passed", fix.summary()


@pytest.mark.parametrize("key", ["0.5.9/rtx", "0.4.10/h100"])
def test_the_launchs_check_server_args_judges_too(
    runs: dict[str, list[ReplayResult]], key: str
) -> None:
    """Validation does not end with ServerArgs: the launch calls check_server_args next, and
    a command it refuses is refused by replay too (0.4.x included, whose import needs a
    CPU probe newer torch dropped)."""
    passed, refused = runs[key][-2:]
    assert passed.status == "passed", passed.summary() + "\n" + passed.log_tail
    assert (passed.ran or "").endswith(" + check_server_args")
    _assert_raised_in(refused, "sglang/srt/server_args.py", "check_server_args")
    assert refused.message == "base_gpu_id must be non-negative"


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every replay that starts something: the warm pool's worker or a cold
    subprocess (the release's option table is read by a cold one too)."""
    started: list[str] = []
    for name in ("run_warm", "run_cold"):
        real = getattr(batches, name)

        def spy(*args, _name=name, _real=real, **kwargs):
            started.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(batches, name, spy)
    return started


def test_results_are_cached(
    sglang_source: Callable[[str], ReleaseSource],
    cache_settings: Settings,
    runs: dict[str, list[ReplayResult]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = runs["0.5.11/b200"][0]
    assert _cache_path(cache_settings.home, first.cache_key).is_file()
    started = _count_runs(monkeypatch)
    again = replay(
        sglang_source("0.5.11").root,
        "0.5.11",
        TRTLLM,
        hardware="b200-x8",
        model_arch=LLAMA,
        settings=cache_settings,
    )
    assert started == []  # answered from the disk cache: no worker, no subprocess
    assert again.cached and again.cache_key == first.cache_key
    assert again.status == first.status


def test_stub_failure_is_a_harness_error(
    sglang_source: Callable[[str], ReleaseSource], cache_settings: Settings
) -> None:
    """A stub raising a plain ValueError mid-validation is never reported as SGLang's verdict."""
    result = replay(
        sglang_source("0.5.11").root,
        "0.5.11",
        FIX,
        hardware="rtx-pro-6000-x8",
        model_arch=DSV3,
        settings=cache_settings,
        timeout_s=120,
        stub_failure="call:get_device_memory_capacity",
    )
    assert result.status == "harness_error", result.summary()
    assert result.exception_type == "ValueError"
    assert result.raised_at is not None and result.raised_at.kind == "stub"
    assert "stub" in (result.harness_reason or "")
    assert result.origin is None
    assert not _cache_path(cache_settings.home, result.cache_key).exists()


def _live_in_group(pgid: int) -> list[str]:
    """The processes of process group ``pgid`` that are still running (not zombies)."""
    alive = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # not a process, or gone meanwhile
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            alive.append(entry.name)
    return alive


def test_timeout_is_a_harness_error(
    sglang_source: Callable[[str], ReleaseSource],
    cache_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    children: list[subprocess.Popen] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            children.append(self)

    monkeypatch.setattr(launch.subprocess, "Popen", Recorded)
    started = _count_runs(monkeypatch)
    # the cold path: importing torch and SGLang alone outlasts 1.5 s (a warm worker of the
    # vendor, started by an earlier test, would answer in time; test_pool covers its limits)
    result = replay_many(
        sglang_source("0.5.11").root,
        "0.5.11",
        [FIX],
        hardware="h100-x8",
        model_arch=DSV3,
        settings=cache_settings,
        timeout_s=1.5,
        job_timeout_s=1.5,
        use_cache=False,
        pool=False,
    )[0]
    assert result.status == "harness_error"
    assert result.phase == "timeout"  # killed at its 1.5 s deadline, not waited for
    assert "within 2s (killed)" in (result.harness_reason or ""), result.harness_reason
    assert result.ran is None and result.server_args is None  # validation never ran
    # one cold subprocess (the option table is read before, once per tree), killed with
    # everything it started: its process group is empty once the call returns
    assert started[-1] == "run_cold" and started.count("run_cold") <= 2, started
    [child] = children[-1:]
    assert child.returncode is not None
    deadline = time.monotonic() + 30  # the kernel reaps what SIGKILL ended: a wait
    while _live_in_group(child.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _live_in_group(child.pid) == [], "the killed replay left processes running"
