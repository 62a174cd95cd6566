"""The launch scope: which part of SGLang a launch ran, and message locating kept inside it
(``service.engine.locate.scope``; the KB part uses 0.5.23, which raises the same NCCL
message in ``sglang/srt`` and in ``sglang/multimodal_gen``)."""

from __future__ import annotations

import pytest

from service.engine.locate.localize import locate_by_message
from service.engine.locate.scope import Scope, launch_scope
from service.engine.logparse.parse import parse_log

SITE = "/usr/local/lib/python3.11/site-packages"
NCCL = "NCCL only supports CUDA, ROCm and MUSA backends."


def _log(command: str, frames: tuple[str, ...] = (), tail: str = f"ValueError: {NCCL}") -> str:
    tb = "".join(f'  File "{SITE}/{p}", line 10, in f\n    x = 1\n' for p in frames)
    head = "Traceback (most recent call last):\n" if frames else ""
    return f"$ {command}\n{head}{tb}{tail}\n"


def _scope(command: str, frames: tuple[str, ...] = (), **kw: str) -> Scope:
    text = _log(command, frames)
    return launch_scope(parse_log(text), text=text, **kw)


def test_launch_server_means_the_llm_server() -> None:
    for cmd in (
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2",
        "python /opt/sglang/python/sglang/launch_server.py --model-path Qwen/Qwen3-8B",
    ):
        s = _scope(cmd)
        assert s.part == "llm", (cmd, s)
        assert not s.admits("sglang/multimodal_gen/runtime/distributed/pynccl_wrapper.py")
        assert not s.admits("sglang/lang/backend/openai.py")
        assert s.admits("sglang/srt/server_args.py") and s.admits("sglang/srt/layers/fp8.py")
    # even a diffusion-sounding model does not change what launch_server starts
    assert (
        _scope("python -m sglang.launch_server --model-path black-forest-labs/FLUX.1-dev").part
        == "llm"
    )


def test_sglang_generate_means_the_diffusion_runtime() -> None:
    s = _scope("sglang generate --model-path black-forest-labs/FLUX.1-dev --prompt cat")
    assert s.part == "diffusion" and "generate" in s.reason
    assert s.admits("sglang/multimodal_gen/runtime/server_args/server_args.py")
    assert s.admits("sglang/srt/layers/quantization/fp8.py")  # shared layers stay
    assert not s.admits("sglang/srt/server_args.py") and not s.admits("sglang/srt/managers/x.py")
    # a traceback through the diffusion CLI says the same without the command line
    framed = launch_scope(parse_log(_log("", ("sglang/cli/main.py", "sglang/cli/generate.py"))))
    assert framed.part == "diffusion"


@pytest.mark.parametrize(
    ("command", "frames", "kw", "part"),
    [
        ("sglang serve --model-path Qwen/Qwen3-8B --tp 2", (), {}, None),
        ("sglang serve --model-path black-forest-labs/FLUX.1-dev", (), {}, "diffusion"),
        ("sglang serve --model-path /models/m --ulysses-degree 2", (), {}, "diffusion"),
        ("sglang serve --model-path /models/m", (), {"model_arch": "FluxPipeline"}, "diffusion"),
        (
            "sglang serve --model-path /models/m",
            ("sglang/multimodal_gen/runtime/launch_server.py",),
            {},
            "diffusion",
        ),
        ("sglang serve --model-path /models/m", ("sglang/srt/managers/scheduler.py",), {}, "llm"),
    ],
)
def test_sglang_serve_is_scoped_by_the_other_evidence(
    command: str, frames: tuple[str, ...], kw: dict, part: str | None
) -> None:
    s = _scope(command, frames, **kw)
    assert s.part == part, s
    assert "sglang serve" in s.reason


def test_no_entrypoint_keeps_both_unless_a_frame_says() -> None:
    assert _scope("nvidia-smi").part is None
    assert launch_scope(parse_log(_log("", ("sglang/srt/server_args.py",)))).part == "llm"


def test_keep_never_removes_the_last_candidate() -> None:
    llm = Scope("llm", "test")
    rows = [{"path": "sglang/multimodal_gen/a.py"}, {"path": "sglang/srt/b.py"}]
    kept, note = llm.keep(rows)
    assert kept == [rows[1]] and note is not None and "1 candidate" in note
    only_outside, note = llm.keep(rows[:1])
    assert only_outside == rows[:1] and note is not None and "kept those outside" in note
    assert Scope(None, "either").keep(rows) == (rows, None)


def test_message_locating_stays_inside_the_launch(store) -> None:
    """The same message is raised in sglang/srt and in sglang/multimodal_gen: the entrypoint
    decides which one is reported; without one both stay candidates."""

    def located(command: str):
        text = _log(command)
        parsed = parse_log(text)
        assert parsed.primary is not None
        return locate_by_message(parsed.primary, store, "0.5.23", launch_scope(parsed, text=text))

    both = located("nvidia-smi")
    assert both is not None
    paths = {both.check.path, *(a.path for a in both.alternatives)}
    assert any(p.startswith("sglang/srt/") for p in paths)
    assert any(p.startswith("sglang/multimodal_gen/") for p in paths)
    llm = located("python -m sglang.launch_server --model-path Qwen/Qwen3-8B")
    assert llm is not None and llm.check.path.startswith("sglang/srt/")
    assert all(not a.path.startswith("sglang/multimodal_gen/") for a in llm.alternatives)
    assert any("outside the LLM server" in n for n in llm.notes)
    gen = located("sglang generate --model-path black-forest-labs/FLUX.1-dev --prompt cat")
    assert gen is not None and gen.check.path.startswith("sglang/")
    assert not gen.check.path.startswith(("sglang/srt/server_args", "sglang/srt/managers"))
