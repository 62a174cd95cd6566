"""Tests of environment, ServerArgs, release, Python and GPU hints
(``service.engine.logparse.environment``), through
:func:`~service.engine.logparse.parse.parse_log`."""

from __future__ import annotations

from service.engine.logparse.parse import ParsedLog, parse_log


def _command(text: str) -> ParsedLog:
    return parse_log(text + "\nRuntimeError: boom\n")


def test_env_forms() -> None:
    parsed = _command(
        "export SGLANG_ENABLE_SPEC_V2=1\n"
        'SGLANG_X="a b" CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server --model-path m\n'
        "MY_SGLANG_Y=2 echo $SGLANG_Z=3\n"
    )
    assert parsed.env == {
        "SGLANG_ENABLE_SPEC_V2": "1",
        "SGLANG_X": "a b",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }


def test_server_args_line() -> None:
    line = (
        "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/models/x', tp_size=8, "
        "speculative_eagle_topk=None, trust_remote_code=True, mem_fraction_static=0.85, "
        "json_model_override_args='{}', cuda_graph_bs=[1, 2, 4], lora_paths={'a': (1, 2)}, "
        "load_format=<LoadFormat.AUTO: 'auto'>, weird=x(1, 2), flag=False)"
    )
    parsed = _command(line)
    assert parsed.server_args == {
        "model_path": "/models/x",
        "tp_size": 8,
        "speculative_eagle_topk": None,
        "trust_remote_code": True,
        "mem_fraction_static": 0.85,
        "json_model_override_args": "{}",
        "cuda_graph_bs": [1, 2, 4],
        "lora_paths": {"a": [1, 2]},
        "load_format": "<LoadFormat.AUTO: 'auto'>",
        "weird": "x(1, 2)",
        "flag": False,
    }
    assert parsed.model == "/models/x"  # from server_args, no command found
    cut = _command("server_args=ServerArgs(model_path='m', tp_size=2, cuda_graph_bs=[1, 2")
    assert cut.server_args == {"model_path": "m", "tp_size": 2, "cuda_graph_bs": "[1, 2"}
    assert any("cut" in n for n in cut.notes)


# --------------------------------------------------------------------------- hints


def test_release_hints() -> None:
    text = """\
pip install "sglang[all]==0.5.11"
Successfully installed sglang-0.5.9 torch-2.8.0
sglang: 0.5.11
  File "/venv/lib/python3.12/site-packages/sglang-0.5.11.dist-info/METADATA", line 1, in x
SGLang `0.5.19.dev410+gedff717ef` (sha `edff717ef`), flashinfer-python 0.6.17
sglang version 0.5.9
- sglang: `0.0.0.dev1+g033446bb05` (dev build from image 1.0.0.270)
Downloading sglang-0.5.12-py3-none-any.whl (3.1 MB)
ValueError: boom
"""
    hints = [(h.version, h.kind) for h in parse_log(text).release_hints]
    assert hints == [
        ("0.5.11", "pip"),
        ("0.5.9", "pip"),
        ("0.5.11", "check_env"),
        ("0.5.11", "dist_info"),
        ("0.5.19.dev410+gedff717ef", "version_string"),
        ("0.5.9", "version_string"),
        ("0.0.0.dev1+g033446bb05", "check_env"),
        ("0.5.12", "pip"),
    ]


def test_python_version_from_text() -> None:
    assert _command("Python: 3.10.12 (main, Nov 20 2023)").python_version == "3.10"
    assert _command("nothing here").python_version is None


def test_gpus_from_check_env_nvidia_smi_and_text() -> None:
    text = """\
Python: 3.12.3
CUDA available: True
GPU 0,1,2,3,4,5,6,7: NVIDIA RTX PRO 6000 Blackwell Server Edition
GPU 0,1,2,3,4,5,6,7 Compute Capability: 12.0
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   33C    P0             70W /  700W |       0MiB /  81559MiB |      0%      Default |
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |                    0 |
| N/A   33C    P0             70W /  700W |       0MiB /  81559MiB |      0%      Default |
GPU 0: Tesla T4 (UUID: GPU-0aa1)
Running on 4x H20 and a GB200 GPU, 8 × B300 too.
ValueError: boom
"""
    parsed = parse_log(text)
    gpus = {g.name: (g.sm, g.count, g.memory_gb) for g in parsed.gpus}
    assert gpus == {
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": (120, 8, None),
        "NVIDIA H100 80GB HBM3": (90, 2, 80),
        "Tesla T4": (75, 1, None),
        "H20": (90, 4, None),
        "GB200": (100, None, None),
        "B300": (103, 8, None),
    }
    assert parsed.python_version == "3.12"


def test_gpu_free_text_forms() -> None:
    parsed = _command("deployed on 8× H100 SXM, also tried 2x RTX PRO 6000 Blackwell (sm_120)")
    assert [(g.name, g.sm, g.count) for g in parsed.gpus] == [
        ("H100 SXM", 90, 8),
        ("RTX PRO 6000 Blackwell", 120, 2),
    ]
    ranged = _command("GPU 0-3: NVIDIA B200")
    assert [(g.name, g.sm, g.count) for g in ranged.gpus] == [("NVIDIA B200", 100, 4)]
    none = _command("model L4 layer T4 variable")  # no count, vendor or "GPU": not a GPU
    assert none.gpus == []


def test_warnings_from_sglang_files() -> None:
    lines = [
        "/sgl-workspace/sglang/python/sglang/launch_server.py:54: UserWarning: "
        "'python -m sglang.launch_server' is still supported",
        "  warnings.warn(",
        "/usr/lib/python3.12/site-packages/transformers/utils.py:10: FutureWarning: not ours",
        "/usr/local/lib/python3.11/dist-packages/sglang/srt/server_args.py:900: "
        "DeprecationWarning: --foo is deprecated",
        "/sgl-workspace/sglang/python/sglang/launch_server.py:54: UserWarning: printed twice",
        "[2026-03-23 14:01:38] WARNING model_config.py:1098: a logger line, not a warning",
    ]
    found = _command("\n".join(lines)).warnings
    assert [(w.path, w.line, w.category) for w in found] == [
        ("sglang/launch_server.py", 54, "UserWarning"),
        ("sglang/srt/server_args.py", 900, "DeprecationWarning"),
    ]
    assert found[1].message == "--foo is deprecated"
    assert (
        _command("\n".join(["/x/sglang_x.py:1: UserWarning: " + "a" * 1000] * 100)).warnings == []
    )
