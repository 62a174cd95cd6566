"""The facts of the machine, read the way ``sglang-triage run`` reads them: a real interpreter
(a venv holding a small ``sglang`` distribution), real ``nvidia-smi``/``rocm-smi``
executables on ``PATH`` printing recorded output (no GPU here), real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from service.watch.facts import (
    MAX_CONFIG_BYTES,
    env_facts,
    gather,
    installed_release,
    interpreter_for,
    model_facts,
)
from service.watch.gpus import hardware_from_smi, read_gpus

#: recorded ``nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version
#: --format=csv,noheader`` output of an 8-GPU RTX PRO 6000 host
RTX_CSV = "".join(
    "NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 12.0, 575.57.08\n" for _ in range(8)
)
H100_CSV = "".join("NVIDIA H100 80GB HBM3, 81559 MiB, 9.0, 550.54.15\n" for _ in range(8))
H100_TABLE = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   27C    P0             69W /  700W |       0MiB /  81559MiB |      0%      Default |
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |                    0 |
| N/A   27C    P0             69W /  700W |       0MiB /  81559MiB |      0%      Default |
"""


def fake_sglang(
    root: Path,
    version: str,
    launch_server: str = "",
    *,
    init: str = "",
    direct_url: dict | None = None,
) -> Path:
    """A venv at ``root`` (``python -m venv --without-pip``) holding a package ``sglang``
    whose ``dist-info/METADATA`` says ``version``; ``sglang.launch_server`` runs
    ``launch_server``. Returns the venv's ``python``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site = Path(purelib)
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text(init)
    (site / "sglang" / "launch_server.py").write_text(launch_server)
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    if direct_url is not None:
        (dist / "direct_url.json").write_text(json.dumps(direct_url))
    return python


def tool(bin_dir: Path, name: str, script: str) -> Path:
    """An executable ``bin_dir/name`` (a POSIX shell script)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def smi_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """The environment with ``bin_dir`` alone on ``PATH`` (plus /bin for sh), no GPU variables."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    return {**env, **extra}


# ------------------------------------------------------------------------ interpreter


def test_the_interpreter_is_the_one_the_command_names(tmp_path: Path) -> None:
    py = fake_sglang(tmp_path / "venv", "0.5.11")
    assert interpreter_for([str(py), "-m", "sglang.launch_server"])[0] == str(py)
    # a console script: the interpreter of its shebang
    script = tool(tmp_path / "bin", "sglang", "")
    script.write_text(f"#!{py}\nimport sys\n")
    found, how = interpreter_for([str(script), "serve", "--model-path", "m"])
    assert found == str(py) and "shebang" in how
    # `#!/usr/bin/env python3` resolved on the launch's PATH
    (tmp_path / "envbin").mkdir()
    (tmp_path / "envbin" / "python3").symlink_to(py)
    script.write_text("#!/usr/bin/env python3\n")
    env = {"PATH": f"{tmp_path / 'envbin'}:/usr/bin:/bin"}
    assert interpreter_for(
        ["sglang", "serve"], {**env, "PATH": f"{tmp_path / 'bin'}:{env['PATH']}"}
    )[0] == str(tmp_path / "envbin" / "python3")
    # behind `env NAME=value`
    assert interpreter_for(["env", "SGLANG_X=1", str(py), "-m", "sglang.launch_server"])[0] == str(
        py
    )
    # something else: our own interpreter
    assert interpreter_for(["/bin/sh", "-c", "true"])[0] == sys.executable


def test_the_installed_release_is_read_without_importing_sglang(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    py = fake_sglang(
        tmp_path / "venv",
        "0.5.19.dev410+gedff717ef",
        init=f"open({str(marker)!r}, 'w').write('x')\n",
        direct_url={
            "url": "https://github.com/sgl-project/sglang.git",
            "vcs_info": {"vcs": "git", "commit_id": "edff717ef0123456789abcdef0123456789abcde"},
        },
    )
    fact, note = installed_release(str(py), "the command's interpreter")
    assert note is None and not marker.exists()
    assert fact["version"] == "0.5.19.dev410+gedff717ef" and fact["source"] == "installed"
    assert fact["commit"] == "edff717ef0123456789abcdef0123456789abcde" and fact["dev_build"]
    assert fact["location"].endswith("site-packages/sglang") and Path(fact["location"]).is_dir()
    assert fact["python"].startswith(f"{sys.version_info[0]}.")


def test_an_interpreter_without_sglang_says_so(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True)
    fact, note = installed_release(str(tmp_path / "v" / "bin" / "python"), "x")
    assert fact == {} and "not installed" in (note or "")
    fact, note = installed_release(str(tmp_path / "missing-python"), "x")
    assert fact == {} and "could not ask" in (note or "")


# ---------------------------------------------------------------------------- GPUs


def test_recorded_query_gpu_output_maps_to_a_profile() -> None:
    hw = hardware_from_smi(RTX_CSV)
    assert hw["profile"] == "rtx-pro-6000-x8" and hw["count"] == 8
    assert hw["evidence"].startswith("NVIDIA RTX PRO 6000") and hw["source"] == "nvidia-smi"
    assert hw["gpus"] == [
        {
            "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "count": 8,
            "memory_mib": 97887,
            "compute_capability": "12.0",
            "driver": "575.57.08",
        }
    ]
    # CUDA_VISIBLE_DEVICES narrows the count
    assert hardware_from_smi(H100_CSV, {"CUDA_VISIBLE_DEVICES": "0,1"})["profile"] == "h100-x2"
    # a GPU without a profile of its own: the closest of its compute capability and memory
    odd = hardware_from_smi("NVIDIA RTX 6000 Ada Generation, 49140 MiB, 8.9, 550.54.15\n" * 2)
    assert odd["profile"] == "l40s-x2" and "compute capability 8.9" in odd["detail"]
    assert hardware_from_smi("No devices were found\n") == {}


def test_the_table_and_the_list_forms_are_read_too() -> None:
    hw = hardware_from_smi(H100_TABLE)
    assert hw["profile"] == "h100-x2" and hw["gpus"][0]["driver"] == "550.54.15"
    assert hw["gpus"][0]["memory_mib"] == 81559
    listed = hardware_from_smi(
        "GPU 0: NVIDIA B200 (UUID: GPU-1)\nGPU 1: NVIDIA B200 (UUID: GPU-2)\n"
    )
    assert listed["profile"] == "b200-x2"


def test_nvidia_smi_on_path_is_run_with_the_query(tmp_path: Path) -> None:
    args = tmp_path / "args"
    tool(tmp_path / "bin", "nvidia-smi", f'echo "$@" > {args}\ncat <<EOF\n{RTX_CSV}EOF\n')
    hw, notes = read_gpus(smi_env(tmp_path / "bin"))
    assert hw["profile"] == "rtx-pro-6000-x8" and notes == []
    assert args.read_text().split() == [
        "--query-gpu=name,memory.total,compute_cap,driver_version",
        "--format=csv,noheader",
    ]


def test_an_old_driver_without_compute_cap_is_asked_again(tmp_path: Path) -> None:
    tool(
        tmp_path / "bin",
        "nvidia-smi",
        'case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field\'; exit 2;; esac\n'
        'echo "NVIDIA H100 80GB HBM3, 81559 MiB, 535.1"\n',
    )
    hw, _ = read_gpus(smi_env(tmp_path / "bin"))
    assert hw["profile"] == "h100-x1" and hw["gpus"][0]["driver"] == "535.1"


def test_rocm_smi_when_there_is_no_nvidia_smi(tmp_path: Path) -> None:
    cards = {
        f"card{i}": {
            "Card series": "AMD Instinct MI300X",
            "GFX Version": "gfx942",
            "VRAM Total Memory (B)": str(192 * 1024**3),
        }
        for i in range(8)
    }
    tool(tmp_path / "bin", "rocm-smi", f"cat <<'EOF'\n{json.dumps(cards)}\nEOF\n")
    hw, _ = read_gpus(smi_env(tmp_path / "bin"))
    assert hw["profile"] == "mi300x-x8" and hw["source"].startswith("rocm-smi")


def test_no_gpu_tool_is_a_note(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    hw, notes = read_gpus(smi_env(tmp_path / "bin"))
    assert hw == {} and "neither nvidia-smi nor rocm-smi" in notes[0]
    tool(tmp_path / "bin2", "nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    hw, notes = read_gpus(smi_env(tmp_path / "bin2"))
    assert hw == {} and "exited 9" in notes[0]


# ------------------------------------------------------------------------ model, env


def test_a_local_model_config_is_read_within_bounds(tmp_path: Path) -> None:
    model = tmp_path / "Kimi-K2.6"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["KimiK25ForConditionalGeneration"],
                "model_type": "kimi_k25",
                "quantization_config": {"quant_method": "compressed-tensors"},
            }
        )
    )
    fact, note = model_facts(["python", "-m", "sglang.launch_server", f"--model-path={model}"])
    assert (
        note is None
        and fact["source"] == "config.json"
        and fact["detail"] == str(model / "config.json")
    )
    assert fact["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert fact["quantization"] == "compressed-tensors" and fact["model_type"] == "kimi_k25"
    (model / "config.json").write_bytes(b" " * (MAX_CONFIG_BYTES + 1))
    fact, note = model_facts(["sglang", "serve", "--model-path", str(model)])
    assert "not read" in (note or "") and "architectures" not in fact
    fact, note = model_facts(["sglang", "serve", "--model-path", "moonshotai/Kimi-K2.6"])
    assert fact == {
        "path": "moonshotai/Kimi-K2.6",
        "source": "command line",
        "detail": "--model-path",
    }


def test_sglang_environment_is_kept_and_secrets_hidden() -> None:
    env = {
        "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
        "SGLANG_API_KEY": "sk-abcdefghijklmnopqrstuvwxyz123456",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HOME": "/root",
        "HF_TOKEN": "hf_x",
    }
    assert env_facts(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SGLANG_API_KEY": "<hidden>",
        "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
    }


def test_gather_labels_every_fact_and_a_given_release_wins(tmp_path: Path) -> None:
    py = fake_sglang(tmp_path / "venv", "0.5.11")
    tool(tmp_path / "bin", "nvidia-smi", f"cat <<EOF\n{H100_CSV}EOF\n")
    env = smi_env(tmp_path / "bin", SGLANG_X="1")
    facts = gather([str(py), "-m", "sglang.launch_server", "--tp", "8"], env)
    assert facts.version == "0.5.11" and facts.release["source"] == "installed"
    assert facts.profile == "h100-x8" and facts.hardware["source"].startswith("nvidia-smi")
    assert facts.env == {"SGLANG_X": "1"} and facts.notes == []
    given = gather([str(py), "-m", "sglang.launch_server"], env, release="0.5.23", hardware="b200")
    assert given.release == {"version": "0.5.23", "source": "given", "detail": "--release"}
    assert given.hardware["profile"] == "b200-x8" and given.hardware["source"] == "given"
