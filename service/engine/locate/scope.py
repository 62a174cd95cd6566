"""Which part of SGLang a launch ran: the LLM server, the diffusion runtime, or either.

One SGLang wheel holds two servers. ``python -m sglang.launch_server`` (and
``launch_server.py``) starts the LLM server, whose code is ``sglang/srt``; ``sglang
generate`` is the diffusion CLI, whose code is ``sglang/multimodal_gen``; ``sglang serve``
starts either, by the model (newer releases). A message that matches a check of the part
that never ran is a coincidence of wording, not the check that fired, so locating by
message or search keeps only candidates inside the launch's :class:`Scope`:

* **LLM server** (``launch_server``, or ``sglang serve`` with LLM evidence): never a check
  under :data:`DIFFUSION_ONLY` (``sglang/multimodal_gen/``) nor in SGLang's other
  programs (:data:`OTHER_PROGRAMS`: the frontend language, benchmarks, tests);
* **diffusion** (``sglang generate``, or ``sglang serve`` with diffusion evidence): never a
  check of the LLM server's own start-up (:data:`LLM_ONLY`: ``server_args.py``, its
  ``arg_groups``, managers, entrypoints, speculative decoding, disaggregation) nor of the
  other programs; ``sglang/srt`` layers and utilities stay (the diffusion runtime imports
  them);
* **either** (``sglang serve`` without evidence, or no entrypoint at all): no restriction.

Evidence for ``sglang serve`` (first that applies): a traceback frame under
``sglang/multimodal_gen/`` (diffusion) or under ``sglang/srt/`` outside the shared layers
(LLM); a flag only the diffusion parser has (:data:`DIFFUSION_FLAGS`); the model: an
architecture named like a diffusers pipeline (``FluxPipeline``) or a model name holding a
diffusion family's word (:data:`DIFFUSION_MODEL_WORDS`) means diffusion. A scope never
removes the last candidate on its own: callers keep the unscoped answer when nothing in
scope matches, with a note (:meth:`Scope.keep`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from service.engine.logparse.parse import ParsedLog

__all__ = [
    "DIFFUSION_FLAGS",
    "DIFFUSION_MODEL_WORDS",
    "DIFFUSION_ONLY",
    "LLM_ONLY",
    "OTHER_PROGRAMS",
    "Scope",
    "launch_scope",
]

Part = Literal["llm", "diffusion"]

DIFFUSION_ONLY = ("sglang/multimodal_gen/",)
"""Paths only the diffusion runtime runs."""
LLM_ONLY = (
    "sglang/srt/server_args.py",
    "sglang/srt/arg_groups/",
    "sglang/srt/managers/",
    "sglang/srt/entrypoints/",
    "sglang/srt/speculative/",
    "sglang/srt/disaggregation/",
    "sglang/launch_server.py",
)
"""Paths only the LLM server runs (its arguments, scheduler, HTTP server)."""
OTHER_PROGRAMS = ("sglang/lang/", "sglang/test/", "sglang/benchmark/", "sglang/bench_")
"""SGLang's other programs: neither server runs them at start-up."""
DIFFUSION_FLAGS = frozenset(
    {
        "--num-gpus",
        "--sp-degree",
        "--ulysses-degree",
        "--ring-degree",
        "--enable-cfg-parallel",
        "--dit-cpu-offload",
        "--dit-layerwise-offload",
        "--text-encoder-cpu-offload",
        "--vae-cpu-offload",
        "--image-encoder-cpu-offload",
    }
)
"""Flags of the diffusion parser (``multimodal_gen``'s ``ServerArgs``) the LLM server lacks
(checked against 0.5.23: none is declared under ``sglang/srt``)."""
DIFFUSION_MODEL_WORDS = (
    "flux",
    "stable-diffusion",
    "sdxl",
    "sd3",
    "wan2.",
    "wan-ai",
    "hunyuanvideo",
    "hunyuan-video",
    "qwen-image",
    "z-image",
    "ltx-video",
    "cogvideo",
    "mochi",
    "diffusion",
)
"""Lower-case words of diffusion model names (Hugging Face ids of the families SGLang's
diffusion runtime serves)."""
_PIPELINE_ARCH = re.compile(r"[A-Za-z0-9]{1,80}Pipeline")
_GENERATE = re.compile(r"(?:^|[\s/])sglang[ \t]{1,8}generate(?:\s|$)")
#: characters of a log text searched for ``sglang generate`` (the command sits near the top)
_TEXT_SCAN = 64 * 1024


@dataclass(frozen=True)
class Scope:
    """The part of SGLang a launch ran (None: either) and why."""

    part: Part | None
    reason: str

    def admits(self, path: str | None) -> bool:
        """May a check at ``path`` have fired in this launch?"""
        p = path or ""
        if self.part is None:
            return True
        if p.startswith(OTHER_PROGRAMS):
            return False
        excluded = DIFFUSION_ONLY if self.part == "llm" else LLM_ONLY
        return not p.startswith(excluded)

    def keep(self, rows: Sequence[Any], path_of: str = "path") -> tuple[list[Any], str | None]:
        """The rows (dicts or objects with a ``path``) in scope, and a note on what was
        left out; all rows and a note when none is in scope (the scope is evidence, not
        proof: a wrong guess must not hide the only candidate)."""

        def path(r: Any) -> str:
            return str(r.get(path_of) if isinstance(r, dict) else getattr(r, path_of, ""))

        inside = [r for r in rows if self.admits(path(r))]
        dropped = len(rows) - len(inside)
        if not dropped:
            return list(rows), None
        what = "the LLM server" if self.part == "llm" else "the diffusion runtime"
        if not inside:
            return list(rows), (f"no candidate is in {what} ({self.reason}); kept those outside it")
        return inside, (f"{dropped} candidate(s) outside {what} not considered ({self.reason})")


def _serve_evidence(
    frames: Iterable[str], argv: Sequence[str], model: str | None, model_arch: str | None
) -> tuple[Part, str] | None:
    paths = list(frames)
    if any(p.startswith(DIFFUSION_ONLY) for p in paths):
        return "diffusion", "a traceback frame is in sglang/multimodal_gen"
    if any(p.startswith(LLM_ONLY) for p in paths):
        return "llm", "a traceback frame is in the LLM server's start-up"
    flags = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    diffusion_flags = sorted(flags & DIFFUSION_FLAGS)
    if diffusion_flags:
        return "diffusion", f"{diffusion_flags[0]} is a flag of the diffusion parser"
    if model_arch and _PIPELINE_ARCH.fullmatch(model_arch):
        return "diffusion", f"{model_arch} is a diffusion pipeline"
    name = (model or "").lower()
    word = next((w for w in DIFFUSION_MODEL_WORDS if w in name), None)
    if word is not None:
        return "diffusion", f"{model} is a diffusion model ({word})"
    return None


def launch_scope(
    parsed: ParsedLog,
    *,
    model: str | None = None,
    model_arch: str | None = None,
    text: str | None = None,
) -> Scope:
    """The :class:`Scope` of the launch ``parsed`` comes from (see the module docstring).

    ``text`` is the log itself, searched (its first :data:`_TEXT_SCAN` characters) for an
    ``sglang generate`` command, which the command parser does not read as a launch."""
    entry = (parsed.entrypoint or "").strip()
    frames = [f.package_path for e in parsed.exceptions for f in e.frames if f.package_path]
    if "launch_server" in entry:
        return Scope("llm", f"`{entry}` starts the LLM server")
    if any(p.startswith("sglang/cli/generate") for p in frames) or (
        text is not None and _GENERATE.search(text[:_TEXT_SCAN])
    ):
        return Scope("diffusion", "`sglang generate` runs the diffusion runtime")
    if entry.endswith("sglang serve"):
        found = _serve_evidence(frames, parsed.command or [], model or parsed.model, model_arch)
        if found is None:
            return Scope(
                None,
                "`sglang serve` serves LLMs and diffusion models; nothing in the log tells which",
            )
        return Scope(found[0], f"`sglang serve`, and {found[1]}")
    found = _serve_evidence(frames, (), None, None)
    if found is not None:
        return Scope(found[0], f"no entrypoint in the log, but {found[1]}")
    return Scope(None, "no entrypoint in the log")
