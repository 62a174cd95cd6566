"""Hardware read from the log (issue 28, item 3): GPU names, capabilities, counts and memory
in the forms tools print them, mapped to the closest known profile, and used by a triage that
declares no hardware (a declared one always wins)."""

from __future__ import annotations

import pytest

from evals.render import render_log
from service.engine.facts.from_log import hardware_from_log
from service.engine.logparse.gpus import find_gpus
from service.engine.logparse.parse import parse_log
from service.engine.logparse.text import clean_log
from service.engine.triage import Engine

NVIDIA_SMI_B200 = """\
Wed Jan  7 10:12:01 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA B200                    On  |   00000000:1B:00.0 Off |                    0 |
| N/A   30C    P0            140W / 1000W |       0MiB / 183359MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA B200                    On  |   00000000:43:00.0 Off |                    0 |
| N/A   31C    P0            141W / 1000W |       0MiB / 183359MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
"""
NVIDIA_SMI_ONE_LINE = (
    "|   0  NVIDIA H100 80GB HBM3   On  | 00000000:18:00.0 Off | 81559MiB |\n"
    "|   1  NVIDIA H100 80GB HBM3   On  | 00000000:2A:00.0 Off | 81559MiB |\n"
    "|   2  NVIDIA H100 80GB HBM3   On  | 00000000:3A:00.0 Off | 81559MiB |\n"
    "|   3  NVIDIA H100 80GB HBM3   On  | 00000000:5D:00.0 Off | 81559MiB |\n"
)
NVIDIA_SMI_TRUNCATED = (
    "|   0  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:1B:00.0 Off |                  Off |\n"
    "|  30%   33C    P8             11W /  600W |       2MiB /  97887MiB |      0%      Default |\n"
)
CHECK_ENV_H200 = """\
Python: 3.12.3 (main, Feb  4 2025, 14:48:35) [GCC 13.3.0]
CUDA available: True
GPU 0,1,2,3,4,5,6,7: NVIDIA H200
GPU 0,1,2,3,4,5,6,7 Compute Capability: 9.0
CUDA_HOME: /usr/local/cuda
NVCC: Cuda compilation tools, release 12.8, V12.8.93
CUDA Driver Version: 570.86.15
PyTorch: 2.8.0+cu128
sglang: 0.5.11
"""
CHECK_ENV_MI300X = """\
ROCM available: True
GPU 0,1,2,3,4,5,6,7: AMD Instinct MI300X
GPU 0,1,2,3,4,5,6,7 Compute Capability: 9.4
ROCM_HOME: /opt/rocm
HIPCC: HIP version: 6.3.42131-fa1d09cbd
ROCM Driver Version: 6.10.5
"""
TORCH_PROPS_B200 = (
    ">>> torch.cuda.get_device_properties(0)\n"
    "_CudaDeviceProperties(name='NVIDIA B200', major=10, minor=0, total_memory=183359MB, "
    "multi_processor_count=148, uuid=7d1e7d0a-6c3f-8f0b-2c1f-5d2a9f1e0c11, L2_cache_size=126MB)\n"
)
TORCH_PROPS_MI355X = (
    "_CudaDeviceProperties(name='AMD Instinct MI355X', major=9, minor=5, "
    "gcnArchName='gfx950:sramecc+:xnack-', total_memory=294896MB, multi_processor_count=256, "
    "uuid=58-e5, L2_cache_size=4MB)\n"
)
ROCM_ARCH_ONLY = (
    "[2026-01-07 10:00:00] Detected ROCm device, gcnArchName='gfx942:sramecc+:xnack-'\n"
)
CAPABILITY_BLACKWELL = (
    "[2026-01-07 10:00:01] torch.cuda.get_device_capability() = (12, 0)\n"
    "[2026-01-07 10:00:09 TP0] Load weight begin. avail mem=93.12 GB\n"
)
CAPABILITY_B200 = (
    "[2026-01-07 10:00:01] device capability: (10, 0)\n"
    "[2026-01-07 10:00:09 TP0] Load weight begin. avail mem=176.40 GB\n"
)
TORCH_WARNING_5090 = (
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:262: UserWarning: \n"
    "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
    "PyTorch installation.\n"
)
TORCH_FOUND_GB10 = (
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:283: UserWarning: \n"
    "    Found GPU0 NVIDIA GB10 which is of cuda capability 12.1.\n"
    "    Minimum and Maximum cuda capability supported by this version of PyTorch is\n"
    "    (8.0) - (12.0)\n"
)
CAPABILITY_SPARK = "[2026-01-07 10:00:01] device capability: (12, 1)\n"
SGLANG_GPU_LINE = (
    "[2026-01-07 10:00:00] GPU: NVIDIA RTX PRO 6000 Blackwell Server Edition, tp_size=8\n"
)


def _hw(text: str, **kw: object):
    parsed = parse_log(text + "ValueError: boom\n")
    return hardware_from_log(
        parsed.gpus, env=parsed.env, server_args=parsed.server_args, command=parsed.command, **kw
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "name", "sm", "memory_gb"),
    [
        (NVIDIA_SMI_B200, "b200-x2", 100, 179),
        (NVIDIA_SMI_ONE_LINE, "h100-x4", 90, 80),
        (NVIDIA_SMI_TRUNCATED, "rtx-pro-6000-x1", 120, 96),
        (CHECK_ENV_H200, "h200-x8", 90, 141),
        (CHECK_ENV_MI300X, "mi300x-x8", None, 192),
        (TORCH_PROPS_B200, "b200-x8", 100, 179),
        (TORCH_PROPS_MI355X, "mi355x-x8", None, 288),
        (ROCM_ARCH_ONLY, "mi300x-x8", None, 192),
        (CAPABILITY_BLACKWELL, "rtx-pro-6000-x8", 120, 96),
        (CAPABILITY_B200, "b200-x8", 100, 180),
        (TORCH_WARNING_5090, "rtx-5090-x1", 120, 32),
        (SGLANG_GPU_LINE, "rtx-pro-6000-x8", 120, 96),
        (TORCH_FOUND_GB10, "dgx-spark-x1", 121, 128),
        (CAPABILITY_SPARK, "dgx-spark-x1", 121, 128),
    ],
    ids=[
        "nvidia-smi",
        "nvidia-smi-one-line",
        "nvidia-smi-truncated",
        "check_env",
        "check_env-rocm",
        "torch-props",
        "torch-props-rocm",
        "gcn-arch",
        "capability-tuple",
        "capability-b200",
        "torch-warning",
        "sglang-gpu-line",
        "torch-found-gpu",
        "capability-12-1",
    ],
)
def test_profile_from_each_log_form(text: str, name: str, sm: int | None, memory_gb: int) -> None:
    found = _hw(text)
    assert found is not None
    assert (found.profile.name, found.profile.sm, found.profile.memory_gb) == (name, sm, memory_gb)
    assert found.evidence in [line.strip() for line in clean_log(text)]  # a line of the log


def test_capability_without_name_fits_memory() -> None:
    # (12, 0) with 30 GB free is a GeForce card, not the 96 GB RTX PRO 6000
    found = _hw("device capability: (12, 0)\nLoad weight begin. avail mem=29.80 GB\n")
    assert found is not None and found.profile.name.startswith("rtx-5090-")
    # (9, 0) with ~139 GB free is an H200; with no memory the listed H100 is the closest
    h200 = _hw("get_device_capability(): (9, 0)\nMemory pool end. avail mem=139.20 GB\n")
    assert h200 is not None and h200.profile.name.startswith("h200-")
    h100 = _hw("get_device_capability(): (9, 0)\n")
    assert h100 is not None and h100.profile.name == "h100-x8"
    assert "compute capability 9.0" in h100.detail


def test_requirements_and_capability_lists_are_not_the_device() -> None:
    for text in (
        "ValueError: FlashMLA requires compute capability >= (9, 0)\n",
        "RuntimeError: minimum compute capability (8, 0) needed\n",
        "kernel supports capability (9, 0) and capability (10, 0) only\n",
        "ValueError: --enable-deepseek-v4-fp4-indexer requires SM100, SM120, or gfx95 "
        "GPUs with FP4 indexer support.\n",
    ):
        assert find_gpus(clean_log(text)) == [], text


def test_count_from_visible_devices_listing_and_parallel_sizes() -> None:
    listed = "GPU 0,1,2,3,4,5,6,7: NVIDIA H200\n"
    cmd = "$ python3 -m sglang.launch_server --model-path m --tp 4 --pp-size 2\n"
    assert _hw(listed).profile.name == "h200-x8"  # type: ignore[union-attr]
    # the command's parallel sizes when the log lists no GPUs: tp 4 x pp 2
    found = _hw(cmd + "device capability: (9, 0)\n")
    assert found is not None and found.profile.name == "h100-x8" and "tp_size=4" in found.detail
    found = _hw(
        "$ python3 -m sglang.launch_server --model-path m --tp 2\n"
        "GPU: NVIDIA RTX PRO 6000 Blackwell Server Edition\n"
    )
    assert found is not None and found.profile.name == "rtx-pro-6000-x2"
    # CUDA_VISIBLE_DEVICES beats the listing (nvidia-smi shows every GPU of the host)
    found = _hw("export CUDA_VISIBLE_DEVICES=0,1\n" + NVIDIA_SMI_ONE_LINE)
    assert found is not None and found.profile.name == "h100-x2"
    assert "CUDA_VISIBLE_DEVICES" in found.detail


def test_name_beats_capability_and_nothing_gives_none() -> None:
    found = _hw("device capability: (12, 0)\nGPU 0,1: NVIDIA B200\n")
    assert found is not None and found.profile.name == "b200-x2"
    assert _hw("Loading safetensors checkpoint shards: 100% 2/2\n") is None
    assert hardware_from_log([]) is None


def test_log_hardware_keeps_what_the_log_printed() -> None:
    # an H100 NVL (94 GB) maps to the h100 profile with its own memory and name
    found = _hw("GPU 0,1: NVIDIA H100 NVL\n|   0  NVIDIA H100 NVL   On  | 0:1 Off | 95830MiB |\n")
    assert found is not None
    assert (found.profile.name, found.profile.gpu, found.profile.memory_gb) == (
        "h100-x2",
        "NVIDIA H100 NVL",
        94,
    )


# ------------------------------------------------------------------- engine (ingested KB)

ARGV = ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8", "--attention-backend", "trtllm_mla"]


@pytest.fixture(scope="module")
def trtllm_mla_log(kb):
    """A log of 0.5.11's "TRTLLM MLA backend is only supported on Blackwell" check: it
    fires unless ``is_blackwell_supported()``; ``preamble`` lines are the GPU prints."""
    check = next(
        c
        for c in kb.store.checks(
            "0.5.11", function="ServerArgs._handle_attention_backend_compatibility"
        )
        if "TRTLLM MLA backend is only supported on Blackwell" in (c.message or "")
    )
    return lambda preamble: render_log(kb.store, "0.5.11", check, argv=ARGV, preamble=preamble)


def _blackwell_input(result):
    return next(
        i for a in result.evaluation.atoms for i in a.inputs if i.name == "is_blackwell_supported()"
    )


def test_engine_uses_the_gpu_the_log_prints(kb, trtllm_mla_log) -> None:
    engine = Engine(kb)
    hopper = engine.triage(
        trtllm_mla_log(["GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3"]), release="0.5.11"
    )
    assert hopper.parsed.hardware == "h100-x8"  # what replay runs on
    assert hopper.hardware is not None and hopper.hardware.source == "log"
    assert hopper.hardware.evidence == "GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3"
    assert hopper.evaluation.fired == "true"
    fact = _blackwell_input(hopper)
    assert fact.value is False and "h100-x8" in fact.detail and "printed in the log" in fact.detail

    blackwell = engine.triage(
        trtllm_mla_log(
            [
                "torch.cuda.get_device_capability() = (12, 0)",
                "Load weight begin. avail mem=93.12 GB",
            ]
        ),
        release="0.5.11",
    )
    assert blackwell.parsed.hardware == "rtx-pro-6000-x8"
    assert blackwell.hardware is not None and blackwell.hardware.source == "log"
    assert "(12, 0)" in blackwell.hardware.evidence
    assert blackwell.evaluation.fired == "false"  # the check cannot fire on this GPU
    assert _blackwell_input(blackwell).value is True


def test_declared_hardware_beats_the_log(kb, trtllm_mla_log) -> None:
    result = Engine(kb).triage(
        trtllm_mla_log(["GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3"]),
        release="0.5.11",
        hardware="b200-x8",
    )
    assert result.parsed.hardware == "b200-x8"
    assert result.hardware is not None
    assert (result.hardware.name, result.hardware.source, result.hardware.evidence) == (
        "b200-x8",
        "request",
        "",
    )
    fact = _blackwell_input(result)
    assert (
        fact.value is True and "b200-x8" in fact.detail and "printed in the log" not in fact.detail
    )
