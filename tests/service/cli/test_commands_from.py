"""Launch commands found in shell and Slurm scripts, systemd units, compose files and
Kubernetes manifests (:mod:`service.cli.commands_from`), and the release each is linted on."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli.commands_from import ReleaseHint, detect_kind, extract, extract_text
from service.cli.lint import choose_release

SHELL = """\
#!/bin/bash
# python3 -m sglang.launch_server --tp 2   (a comment: not a command)
set -euo pipefail
MODEL=/models/Qwen3-32B
export TP=4
ARGS="--mem-fraction-static 0.85 --context-length 32768"
pip install "sglang[all]==0.5.11"
CUDA_VISIBLE_DEVICES=0,1,2,3 exec python3 -u -m sglang.launch_server \\
    --model-path "$MODEL" \\
    --tp ${TP} $ARGS \\
    --port ${PORT:-30000} --host "$HOST" "$@" 2>&1 | tee -a /var/log/sglang.log
echo 'python3 -m sglang.launch_server --tp 8' > /dev/null
docker run --gpus all lmsysorg/sglang:v0.5.23-cu129 sglang serve --model-path 'a b' --tp 2 >out.log
bash -c "python -m sglang.launch_server --model-path $MODEL --tp 8; echo done"
"""


def test_shell_script_continuations_env_variables_and_wrappers() -> None:
    got = extract_text(SHELL, "start.sh")
    assert got.kind == "shell"
    first, serve, inner = got.commands
    assert first.line == 8 and first.launcher == ["python3", "-u", "-m", "sglang.launch_server"]
    assert first.argv == [
        "--model-path",
        "/models/Qwen3-32B",
        "--tp",
        "4",
        "--mem-fraction-static",
        "0.85",
        "--context-length",
        "32768",
        "--port",
        "30000",
        "--host",
        "$HOST",
        "$@",
    ]
    assert first.env == {"TP": "4", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}  # exported + prefix
    assert first.unresolved == ["$HOST", "$@"]
    assert first.assumed and "${PORT:-30000}" in first.assumed[0]
    assert first.release_hint == ReleaseHint("0.5.11", "pinned sglang[all]==0.5.11", 7)
    assert "--host $HOST $@" in first.command
    # the echo's single-quoted text is an argument, not a launch; a comment is no command
    assert serve.line == 13 and serve.launcher == ["sglang", "serve"]
    assert serve.argv == ["--model-path", "a b", "--tp", "2"]  # ">out.log" dropped
    assert serve.release_hint is not None and serve.release_hint.version == "0.5.23"
    assert "lmsysorg/sglang:v0.5.23-cu129" in serve.release_hint.source
    assert inner.line == 14 and inner.argv == ["--model-path", "/models/Qwen3-32B", "--tp", "8"]
    assert [h.version for h in got.hints] == ["0.5.11", "0.5.23"]


def test_assignment_with_an_unknown_value_stays_unresolved() -> None:
    text = (
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        "python -m sglang.launch_server --dist-init-addr $HEAD:5000 --node-rank `hostname`\n"
    )
    (cmd,) = extract_text(text, "x.sh").commands
    assert cmd.argv == ["--dist-init-addr", "$HEAD:5000", "--node-rank", "`hostname`"]
    assert cmd.unresolved == ["$HEAD", "`hostname`"]


SLURM = """\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
export MODEL=/models/DeepSeek-V3
srun --container-image=lmsysorg/sglang:v0.5.9 python3 -m sglang.launch_server --model-path $MODEL --tp 16 \\
  --nnodes 2 --node-rank $SLURM_NODEID
srun bash -c '
  python3 -m sglang.launch_server --model-path "$MODEL" --tp 16 --node-rank "$SLURM_NODEID"'
"""


def test_slurm_script() -> None:
    got = extract_text(SLURM, "job.sbatch")
    assert got.kind == "slurm" == detect_kind("job", SLURM)
    a, b = got.commands
    assert a.line == 5 and a.kind == "slurm"
    assert a.argv[-4:] == ["--nnodes", "2", "--node-rank", "$SLURM_NODEID"]
    assert a.release_hint is not None and a.release_hint.version == "0.5.9"
    # single quotes: the inner bash reads the exported MODEL; SLURM_NODEID is the task's own
    assert b.line == 8 and b.argv[:2] == ["--model-path", "/models/DeepSeek-V3"]
    assert b.unresolved == ["$SLURM_NODEID"]


UNIT = """\
[Unit]
Description=sglang
ExecStart=/usr/bin/python3 -m sglang.launch_server --tp 99

[Service]
EnvironmentFile=/etc/sglang.env
Environment="MODEL=/models/Llama 3" TP=8
ExecStartPre=-/opt/triage/bin/sglang-triage lint --from /etc/systemd/system/sglang.service
ExecStart=@/opt/sglang/bin/python3 sglang-server -m sglang.launch_server \\
    --model-path ${MODEL} \\
    # a comment line inside a continuation is skipped
    --tp $TP --served-model-name %i --api-key ${API_KEY}
ExecStartPost=/bin/echo started ; /opt/sglang/bin/sglang serve --port 1
Environment=LATE=1
"""


def test_systemd_unit() -> None:
    got = extract_text(UNIT, "sglang@.service")
    assert got.kind == "systemd" == detect_kind("override.conf", UNIT)
    start, post = got.commands  # [Unit] has no Exec lines; ExecStartPre holds no launch
    assert start.line == 9 and start.where == "ExecStart" and start.kind == "systemd"
    assert start.launcher == ["/opt/sglang/bin/python3", "-m", "sglang.launch_server"]
    assert start.argv == [
        "--model-path",
        "/models/Llama 3",
        "--tp",
        "8",
        "--served-model-name",
        "%i",
        "--api-key",
        "${API_KEY}",
    ]
    assert start.unresolved == ["%i", "${API_KEY}"]
    assert start.env["LATE"] == "1"  # Environment= anywhere in [Service] applies
    assert post.where == "ExecStartPost" and post.argv == ["--port", "1"]


COMPOSE = """\
services:
  string-form:
    image: lmsysorg/sglang:v0.5.16-cu126
    command: python3 -m sglang.launch_server --model-path ${MODEL:-Qwen/Qwen3-8B} --tp ${TP}
  list-form:
    image: lmsysorg/sglang:latest
    entrypoint: ["python3", "-m", "sglang.launch_server"]
    command:
      - --model-path
      - Qwen/Qwen3-8B
      - --tp
      - "2"
  shell-form:
    image: my/sglang:v0.5.21
    environment:
      - MODEL=/models/m
    entrypoint: ["/bin/bash", "-o", "pipefail", "-c"]
    command:
      - |
        echo starting
        sglang serve \\
          --model-path "$${MODEL}" --tp 4 --host $$HOST
  other:
    image: postgres:17
    command: ["postgres", "-c", "max_connections=200"]
"""


def test_compose_string_list_and_shell_forms() -> None:
    got = extract_text(COMPOSE, "compose.yaml")
    assert got.kind == "compose"
    s, lst, sh = got.commands
    assert (s.line, s.where) == (4, "services.string-form")
    assert s.argv == ["--model-path", "Qwen/Qwen3-8B", "--tp", "${TP}"]
    assert s.unresolved == ["${TP}"] and "Qwen/Qwen3-8B" in s.assumed[0]
    assert s.release_hint is not None and s.release_hint.version == "0.5.16"
    assert lst.line == 7 and lst.argv == ["--model-path", "Qwen/Qwen3-8B", "--tp", "2"]
    assert lst.release_hint is not None and lst.release_hint.version == "0.5.16"  # the file's
    # compose's $$ is a literal $, which the shell then reads from the service's environment
    assert (sh.line, sh.launcher) == (21, ["sglang", "serve"])
    assert sh.argv == ["--model-path", "/models/m", "--tp", "4", "--host", "$HOST"]
    assert sh.unresolved == ["$HOST"] and sh.env == {"MODEL": "/models/m"}
    assert sh.release_hint is not None and sh.release_hint.version == "0.5.21"


K8S = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: start}
data:
  start.sh: |
    #!/bin/sh
    exec python3 -m sglang.launch_server --model-path /m --tp 2
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: sglang
spec:
  template:
    spec:
      containers:
        - name: server
          image: lmsysorg/sglang:v0.5.23-cu129
          command: ["python3", "-m", "sglang.launch_server"]
          args: ["--model-path", "$(MODEL)", "--tp", "$(TP)", "--port", "$$30000"]
          env:
            - {name: MODEL, value: Qwen/Qwen3-32B}
            - name: TP
              valueFrom: {configMapKeyRef: {name: c, key: tp}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: bench
spec:
  template:
    spec:
      containers:
        - name: run
          image: lmsysorg/sglang:v0.5.11
          command:
            - sh
            - -c
            - >-
              python3 -m sglang.launch_server --model-path $MODEL --tp 8 && echo ok
          env:
            - {name: MODEL, value: /models/x}
---
apiVersion: v1
kind: Pod
metadata: {name: plain}
spec:
  containers:
    - name: c
      image: busybox
      command: ["sleep", "1"]
"""


def test_kubernetes_multi_document() -> None:
    got = extract_text(K8S, "deploy.yaml")
    assert got.kind == "kubernetes"
    script, server, job = got.commands
    assert (script.line, script.where) == (7, "ConfigMap/start")
    assert script.argv == ["--model-path", "/m", "--tp", "2"]
    assert (server.line, server.where) == (19, "StatefulSet/sglang container server")
    assert server.argv == ["--model-path", "Qwen/Qwen3-32B", "--tp", "$(TP)", "--port", "$30000"]
    assert server.unresolved == ["$(TP)"] and server.env == {"MODEL": "Qwen/Qwen3-32B"}
    assert server.release_hint is not None and server.release_hint.version == "0.5.23"
    assert job.where == "Job/bench container run" and job.line == 40
    assert job.argv == ["--model-path", "/models/x", "--tp", "8"]
    assert job.release_hint is not None and job.release_hint.version == "0.5.11"


def test_files_without_a_command_and_bad_yaml(tmp_path: Path) -> None:
    assert extract_text("#!/bin/sh\necho hello\n# sglang serve --tp 2\n", "a.sh").commands == []
    assert (
        extract_text(
            "services:\n  db: {image: postgres, command: [postgres]}\n", "compose.yml"
        ).commands
        == []
    )
    with pytest.raises(ValueError, match="not valid YAML"):
        extract_text("a: [unclosed\n", "x.yaml")
    with pytest.raises(ValueError, match="cannot read"):
        extract(tmp_path / "missing.sh")
    f = tmp_path / "run.sh"
    f.write_text("sglang serve --model-path /m\n")
    assert extract(f).commands[0].file == str(f)


def test_yaml_aliases_are_read_once() -> None:
    text = (
        "x-cmd: &cmd [python3, -m, sglang.launch_server, --tp, '2']\n"
        "services:\n  a: {command: *cmd}\n  b: {command: *cmd}\n"
    )
    got = extract_text(text, "compose.yaml")
    assert [c.argv for c in got.commands] == [["--tp", "2"]]


def test_choose_release() -> None:
    ingested = ["0.5.9", "0.5.11", "0.5.23"]
    hint = ReleaseHint("0.5.11", "image tag lmsysorg/sglang:v0.5.11", 3)
    assert choose_release("0.5.23", hint, ingested)[0] == "0.5.23"
    assert "the file names 0.5.11" in choose_release("0.5.23", hint, ingested)[1]
    assert choose_release(None, hint, ingested) == (
        "0.5.11",
        "from the file: 0.5.11 (image tag lmsysorg/sglang:v0.5.11, line 3)",
    )
    near, why = choose_release(None, ReleaseHint("0.5.16", "pinned", 1), ingested)
    assert near == "0.5.11" and why.startswith("assumed:") and "not in the KB" in why
    assert choose_release(None, ReleaseHint("0.4.0", "pinned", 1), ingested)[0] == "0.5.9"
    newest, why = choose_release(None, None, ingested)
    assert newest == "0.5.23" and why.startswith("assumed:")
    with pytest.raises(ValueError, match="no release"):
        choose_release(None, None, [])
