"""Tests of launch-command finding (``service.engine.logparse.command``), through
:func:`~service.engine.logparse.parse.parse_log`."""

from __future__ import annotations

import pytest

from service.engine.logparse.parse import ParsedLog, parse_log


def _command(text: str) -> ParsedLog:
    return parse_log(text + "\nRuntimeError: boom\n")


@pytest.mark.parametrize(
    ("text", "argv", "entrypoint"),
    [
        (
            "$ python -m sglang.launch_server --model-path m --tp 8",
            ["--model-path", "m", "--tp", "8"],
            "python -m sglang.launch_server",
        ),
        (
            "CUDA_VISIBLE_DEVICES=0,1 /usr/bin/python3 -u -m sglang.launch_server --model m --tp 2 > log.txt 2>&1 &",
            ["--model", "m", "--tp", "2"],
            "python3 -m sglang.launch_server",
        ),
        (
            "nohup python3 -m sglang.launch_server --model-path m --port 30000 >> out.log 2>&1 &",
            ["--model-path", "m", "--port", "30000"],
            "nohup python3 -m sglang.launch_server",
        ),
        (
            "sglang serve --model-path m --tp-size 2",
            ["--model-path", "m", "--tp-size", "2"],
            "sglang serve",
        ),
        (
            "torchrun --nproc_per_node 8 -m sglang.launch_server --model-path m",
            ["--model-path", "m"],
            "torchrun -m sglang.launch_server",
        ),
        (
            "docker run --gpus all --shm-size 32g -p 30000:30000 -e SGLANG_ENABLE_SPEC_V2=1 "
            "-v /models:/models --ipc=host lmsysorg/sglang:latest python3 -m sglang.launch_server "
            "--model-path /models/m --host 0.0.0.0",
            ["--model-path", "/models/m", "--host", "0.0.0.0"],
            "docker run … python3 -m sglang.launch_server",
        ),
        (
            "python3 /sgl-workspace/sglang/python/sglang/launch_server.py --model-path m",
            ["--model-path", "m"],
            "python3 /sgl-workspace/sglang/python/sglang/launch_server.py",
        ),
    ],
)
def test_command_forms(text: str, argv: list[str], entrypoint: str) -> None:
    parsed = _command(text)
    assert parsed.command == argv
    assert parsed.entrypoint == entrypoint
    assert parsed.model == "m" or parsed.model == "/models/m"


def test_command_continuations_with_log_prefixes() -> None:
    text = (
        "sglang-1  | + python3 -m sglang.launch_server \\\n"
        "sglang-1  |     --model-path Qwen/Qwen3-8B \\\n"
        "sglang-1  |     --reasoning-parser 'qwen3' \\\n"
        "sglang-1  |     --tp 2\n"
        "sglang-1  | ValueError: bad\n"
    )
    parsed = parse_log(text)
    assert parsed.command == [
        "--model-path",
        "Qwen/Qwen3-8B",
        "--reasoning-parser",
        "qwen3",
        "--tp",
        "2",
    ]
    assert parsed.command_text == (
        "+ python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --reasoning-parser 'qwen3' --tp 2"
    )
    assert parsed.model == "Qwen/Qwen3-8B"


def test_command_continuations_with_timestamp_prefixes_and_sh_c() -> None:
    parsed = _command(
        "[2026-01-01 00:00:00] + python3 -m sglang.launch_server --model-path m \\\n"
        "[2026-01-01 00:00:00]     --tp 8 \\\n"
        "[2026-01-01 00:00:00]     --speculative-algorithm EAGLE3"
    )
    assert parsed.command == ["--model-path", "m", "--tp", "8", "--speculative-algorithm", "EAGLE3"]
    shell = _command(
        'docker run --gpus all img /bin/bash -c "python3 -m sglang.launch_server --model-path x'
        ' --tp 2 && echo done"'
    )
    assert shell.command == ["--model-path", "x", "--tp", "2"]
    assert shell.entrypoint == "docker run … python3 -m sglang.launch_server"
    # a quoted mention in prose is not a command
    prose = _command("UserWarning: 'python -m sglang.launch_server --tp 8' is still supported")
    assert prose.command is None


def test_k8s_manifest_block_lists_and_env() -> None:
    text = """\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
      - name: sglang
        image: lmsysorg/sglang:v0.5.11-cu129
        command:
        - python3
        - -m
        - sglang.launch_server
        args:
        - --model-path
        - "deepseek-ai/DeepSeek-V3"
        - --tp
        - '8'
        env:
        - name: SGLANG_ENABLE_JIT_DEEPGEMM
          value: "0"
        - name: CUDA_VISIBLE_DEVICES
          value: 0,1,2,3,4,5,6,7
---
RuntimeError: boom
"""
    parsed = parse_log(text)
    assert parsed.command == ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8"]
    assert parsed.entrypoint == "python3 -m sglang.launch_server"
    assert parsed.model == "deepseek-ai/DeepSeek-V3"
    assert parsed.env == {
        "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    }
    assert [(h.version, h.kind) for h in parsed.release_hints] == [("0.5.11", "version_string")]


def test_yaml_and_json_flow_lists() -> None:
    yaml_args = _command('    args: ["--model-path", "x", "--tp", "8"]')
    assert yaml_args.command == ["--model-path", "x", "--tp", "8"]
    assert yaml_args.entrypoint == "container args list"
    compose = _command(
        "    command: ['python3', '-m', 'sglang.launch_server', '--model-path', 'x',\n"
        "              '--tp', '4']\n"
        "    environment:\n"
        "      SGLANG_USE_MODELSCOPE: 'true'\n"
        "      - SGLANG_DISABLE_CUDNN_CHECK=1\n"
    )
    assert compose.command == ["--model-path", "x", "--tp", "4"]
    assert compose.env == {"SGLANG_USE_MODELSCOPE": "true", "SGLANG_DISABLE_CUDNN_CHECK": "1"}
    as_json = _command(
        '{"command": ["/bin/sh", "-c", "python3 -m sglang.launch_server --model-path x --tp 2"],\n'
        ' "env": {"SGLANG_A": "1", "SGLANG_B": 2}}'
    )
    assert as_json.command == ["--model-path", "x", "--tp", "2"]
    assert as_json.env == {"SGLANG_A": "1", "SGLANG_B": "2"}
    folded = _command(
        "command: >\n  python3 -m sglang.launch_server\n  --model-path x\n  --tp 2\nports: []"
    )
    assert folded.command == ["--model-path", "x", "--tp", "2"]


def test_last_command_wins() -> None:
    parsed = _command(
        "python -m sglang.launch_server --model-path a\npython -m sglang.launch_server --model-path b"
    )
    assert parsed.model == "b"
    assert any("2 launch commands" in n for n in parsed.notes)
