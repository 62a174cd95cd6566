"""Fast checks of the replay pieces that need no subprocess of SGLang: classification,
argv substitution, model folders, the msgspec stub and the socket guard."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kb.errors import ConfigError
from service.engine.facts.core import get_profile
from service.replay.argv_guard import OptionTable
from service.replay.child import guard, values, verdicts
from service.replay.harness import STUB_DIRS, harness_version
from service.replay.model_configs import MODEL_CONFIGS, draft_config, write_model_dir
from service.replay.plan import (
    drop_unsafe,
    hardware_payload,
    probe_values,
    stub_plan,
    substitute_argv,
)


def _raise_from(filename: str, body: str) -> BaseException:
    """An exception whose innermost frame is in ``filename`` (compiled there, not written)."""
    namespace: dict = {}
    exec(compile(body, filename, "exec"), namespace)
    try:
        namespace["f"]()
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


@pytest.fixture()
def roots(tmp_path: Path) -> dict:
    return {"release": str(tmp_path / "tree"), "stubs": [str(d) for d in STUB_DIRS]}


def test_sglang_assertion_is_raised(roots: dict) -> None:
    exc = _raise_from(
        f"{roots['release']}/sglang/srt/server_args.py", "def f():\n    assert 1 == 2, 'topk'\n"
    )
    info = verdicts.classify(exc, roots)
    assert info["status"] == "raised"
    assert info["sglang_origin"]["path"] == "sglang/srt/server_args.py"
    assert info["sglang_origin"]["function"] == "f"


def test_error_raised_in_a_stub_file_is_the_harness(roots: dict) -> None:
    exc = _raise_from(
        f"{STUB_DIRS[0]}/_replay_hw.py", "def f():\n    raise ValueError('looks like validation')\n"
    )
    info = verdicts.classify(exc, roots)
    assert info["status"] == "harness_error"
    assert "inside the stub" in info["harness_reason"]


def test_missing_module_and_stub_objects_are_the_harness(roots: dict) -> None:
    missing = _raise_from(
        f"{roots['release']}/sglang/srt/x.py", "def f():\n    import no_such_module_here\n"
    )
    assert verdicts.classify(missing, roots)["status"] == "harness_error"
    stubby = _raise_from(
        f"{roots['release']}/sglang/srt/x.py",
        "def f():\n    raise TypeError('<replay stub triton.x> is not iterable')\n",
    )
    assert verdicts.classify(stubby, roots)["status"] == "harness_error"


def test_lazy_import_failure_is_the_harness(roots: dict) -> None:
    """An error at module level below a validation frame is an environment problem."""
    frames = [
        {"kind": "harness", "path": "child.py", "line": 1, "function": "validate"},
        {"kind": "sglang", "path": "sglang/srt/server_args.py", "line": 9, "function": "g"},
        {
            "kind": "sglang",
            "path": "sglang/jit_kernel/utils.py",
            "line": 85,
            "function": "<module>",
        },
    ]
    reason = verdicts.harness_reason(RuntimeError("Cannot find sglang.jit_kernel path"), frames)
    assert reason is not None and "sglang/jit_kernel/utils.py" in reason


def test_network_block_is_the_harness() -> None:
    assert verdicts.harness_reason(guard.NetworkBlocked("blocked"), []) is not None


def test_json_safe_values() -> None:
    import enum

    class Color(enum.Enum):
        RED = "red"

    value = values.json_safe({"a": (1, 2.5), "b": {Color.RED}, "c": float("nan"), "d": Path("/x")})
    assert json.loads(json.dumps(value)) == {"a": [1, 2.5], "b": ["red"], "c": "nan", "d": "/x"}


def test_substitute_argv(tmp_path: Path) -> None:
    argv = [
        "--model",
        "moonshotai/Kimi-K2.5",
        "--tokenizer-path",
        "moonshotai/Kimi-K2.5",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path=lmsys/d",
    ]
    out, arch, notes = substitute_argv(argv, None, tmp_path)
    assert arch == "KimiK25ForConditionalGeneration"
    # the model, tokenizer and draft paths are replaced, after the other options
    assert out[:2] == ["--speculative-algorithm", "EAGLE3"]
    assert out[2::2] == ["--model-path", "--tokenizer-path", "--speculative-draft-model-path"]
    assert out[3] == out[5] and Path(out[3], "config.json").is_file()
    draft = Path(out[7])
    assert json.loads((draft / "config.json").read_text())["architectures"] == [
        "LlamaForCausalLMEagle3"
    ]
    assert len(notes) == 4 and argv[1] == "moonshotai/Kimi-K2.5"  # input untouched
    again, _, _ = substitute_argv(argv, None, tmp_path)
    assert again == out  # content-addressed folders are stable


def test_a_local_model_folder_is_never_run(tmp_path: Path) -> None:
    """A user's folder (config.json with auto_map and a .py) is never handed to SGLang: with
    no known architecture replay refuses; with one, a generated folder replaces it."""
    folder = write_model_dir(tmp_path / "m", "LlamaForCausalLM")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text("open('/tmp/pwned', 'w').write('x')\n")
    argv = ["--model-path", str(folder), "--trust-remote-code"]
    out, arch, notes = substitute_argv(argv, None, tmp_path / "home")
    assert out is None and arch is None
    assert "replay refused" in notes[-1] and "--trust-remote-code" in notes[0]
    out, arch, notes = substitute_argv(argv, "LlamaForCausalLM", tmp_path / "home")
    assert out is not None and str(folder) not in out and "--trust-remote-code" not in out
    assert out[0] == "--model-path" and Path(out[1], "config.json").is_file()
    assert Path(out[1]).parent.parent == tmp_path / "home"


def test_flags_that_name_user_files_are_dropped() -> None:
    argv = [
        "--model-path",
        "m",
        "--config",
        "/srv/x.yaml",
        "--trust-remote-code",
        "--tp",
        "8",
        "--chat-template",
        "./tmpl.jinja",
        "--download-dir=/data",
        "--load-format",
        "auto",
        "--speculative-draft-model-path",
        "d",
        "--enable-lora",
        "--lora-paths",
        "/l1",
    ]
    out, dropped = drop_unsafe(argv)  # replay's fallback table (no release parser at hand)
    assert out == [
        "--model-path",
        "m",
        "--tp",
        "8",
        "--load-format",
        "auto",
        "--speculative-draft-model-path",
        "d",
        "--enable-lora",
    ]
    assert dropped == [
        "--config",
        "--trust-remote-code",
        "--chat-template",
        "--download-dir",
        "--lora-paths",
    ]
    table = OptionTable(
        {
            "--model-path": ("model_path", "1"),
            "--config": ("config", "1"),
            "--trust-remote-code": ("trust_remote_code", "0"),
            "--tp-size": ("tp_size", "1"),
            "--chat-template": ("chat_template", "1"),
            "--download-dir": ("download_dir", "1"),
            "--load-format": ("load_format", "1"),
            "--speculative-draft-model-path": ("speculative_draft_model_path", "1"),
            "--enable-lora": ("enable_lora", "?"),
            "--lora-paths": ("lora_paths", "+"),
        }
    )
    out, dropped = drop_unsafe(argv, table)  # the release's own table: expanded spellings
    assert out == [
        "--model-path",
        "m",
        "--tp-size",
        "8",
        "--load-format",
        "auto",
        "--speculative-draft-model-path",
        "d",
        "--enable-lora",
    ]
    assert dropped == [
        "--config",
        "--trust-remote-code",
        "--chat-template",
        "--download-dir",
        "--lora-paths",
    ]


def test_model_configs() -> None:
    dsv3 = MODEL_CONFIGS["DeepseekV3ForCausalLM"]
    assert (dsv3["model_type"], dsv3["hidden_size"], dsv3["num_hidden_layers"]) == (
        "deepseek_v3",
        7168,
        61,
    )
    assert (dsv3["kv_lora_rank"], dsv3["q_lora_rank"], dsv3["qk_rope_head_dim"]) == (512, 1536, 64)
    assert (dsv3["num_attention_heads"], dsv3["n_routed_experts"]) == (128, 256)
    assert draft_config("DeepseekV3ForCausalLM", "NEXTN") == dsv3
    with pytest.raises(ConfigError):
        write_model_dir(Path("/nonexistent"), "NoSuchArch")


def test_hardware_payload_and_probes() -> None:
    rtx, b200 = get_profile("rtx-pro-6000-x8"), get_profile("b200-x8")
    payload = hardware_payload(rtx)
    assert payload["capability"] == [12, 0] and payload["count"] == 8
    assert payload["memory_mib"] == 96 * 1024
    assert probe_values(rtx)["is_sm100_supported"] is False
    assert probe_values(b200)["is_sm100_supported"] is True
    assert probe_values(rtx)["is_blackwell_supported"] is True
    force, fallback = stub_plan(get_profile("mi300x-x8"))
    assert "aiter" in force and "flashinfer" not in force and "psutil" in fallback
    assert hardware_payload(get_profile("cpu"))["memory_mib"] is None


def _run_py(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_msgspec_stub_semantics() -> None:
    """The struct behaviours SGLang 0.5.23 relies on: slots, kw_only order, frozen, defstruct."""
    out = _run_py(f"""
import sys
sys.path[:0] = [{str(STUB_DIRS[0])!r}, {str(STUB_DIRS[1])!r}]
import msgspec
assert getattr(msgspec, "__replay_stub__", False)
class A(msgspec.Struct, kw_only=True):
    k: int = 0
class B(A):
    a: int
    b: list = []
b = B(1, k=2)
assert B.__struct_fields__ == ("a", "b", "k"), B.__struct_fields__
assert b.b == [] and b.b is not B(1).b
try:
    b.typo = 1
    raise SystemExit("attribute accepted")
except AttributeError:
    pass
class F(msgspec.Struct, frozen=True):
    x: int = 1
try:
    F().x = 2
    raise SystemExit("frozen write accepted")
except AttributeError:
    pass
C = msgspec.defstruct("C", [("p", int), ("q", int, 5)], dict=True)
c = C(1); c.extra = 3
assert (c.q, c.__dict__) == (5, {{"extra": 3}})
assert msgspec.structs.replace(c, q=9).q == 9
assert [f.name for f in msgspec.structs.fields(C)] == ["p", "q"]
assert msgspec.structs.fields(C)[1].default == 5
print("ok")
""")
    assert out.strip() == "ok"


def test_socket_guard_blocks_remote_but_not_loopback() -> None:
    out = _run_py(f"""
import socket, sys
sys.path.insert(0, {str(Path(guard.__file__).parent)!r})
import guard
guard.install_socket_guard()
s = socket.socket()
try:
    s.connect(("10.255.255.1", 80))
    print("connected")
except guard.NetworkBlocked:
    print("blocked")
try:
    socket.getaddrinfo("huggingface.co", 443)
    print("resolved")
except guard.NetworkBlocked:
    print("blocked")
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.socket(); c.connect(srv.getsockname()); print("loopback ok")
""")
    assert out.split() == ["blocked", "blocked", "loopback", "ok"]


def test_harness_version_is_stable() -> None:
    assert harness_version() == harness_version() and len(harness_version()) == 16
