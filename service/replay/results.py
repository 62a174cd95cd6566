"""What a replay reports: :class:`ReplayResult` and its traceback :class:`Frame`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from service.replay.messages import vet

__all__ = ["Frame", "ReplayResult", "ReplayStatus", "frame_of", "to_result"]

ReplayStatus = Literal["passed", "raised", "harness_error", "argparse_error"]


class Frame(BaseModel):
    """One traceback frame. ``path`` is package-relative for SGLang (``sglang/srt/...``)."""

    kind: str = "sglang"  # sglang | stub | harness | third_party | stdlib | internal
    path: str
    line: int | None = None
    function: str = ""
    code: str = ""

    def where(self) -> str:
        return f"{self.path}:{self.line} in {self.function}"


class ReplayResult(BaseModel):
    """The outcome of running one command line through a release's own validation.

    ``status``:

    * ``passed``: validation accepted the flags; ``server_args`` holds every
      field of the final ServerArgs (JSON-safe).
    * ``raised``: SGLang's own code refused them; ``exception_type``,
      ``message`` and ``frames`` (the frames inside ``sglang/``, outermost
      first) say where; ``origin`` is the innermost SGLang frame.
    * ``argparse_error``: argparse exited with status 2; ``message`` is its
      error line and ``usage`` the full text.
    * With a start-up probe (:mod:`service.replay.probes`), ``passed`` means validation and
      the probe passed; a probe's refusal is ``raised`` with ``phase`` ``probe``.
    * ``harness_error``: the replay itself failed (a stub, a missing package,
      a lazy import, a timeout, a crash); ``harness_reason`` says why. Never
      SGLang's verdict on the flags.
    """

    status: ReplayStatus
    version: str
    argv: list[str] = Field(description="The command line as given.")
    effective_argv: list[str] = Field(
        default_factory=list, description="As run (model paths replaced)."
    )
    hardware: str | None = None
    model_arch: str | None = None
    substitutions: list[str] = Field(default_factory=list)
    ran: str | None = None
    phase: str | None = None

    exception_type: str | None = None
    message: str | None = None
    frames: list[Frame] = Field(default_factory=list)
    origin: Frame | None = None
    raised_at: Frame | None = Field(None, description="Innermost frame, wherever it is.")
    harness_reason: str | None = None
    usage: str | None = None

    server_args: dict[str, Any] | None = None
    startup: dict[str, Any] | None = Field(
        None,
        description="A start-up probe's report (service.replay.probes): family, steps "
        "run, faked parallel sizes, computed values, notes.",
    )
    probe_disagreements: dict[str, Any] = Field(default_factory=dict)
    stubs_served: list[str] = Field(default_factory=list)
    shims: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    log_tail: str = ""

    timings: dict[str, float] = Field(default_factory=dict)
    cached: bool = False
    cache_key: str = ""

    @property
    def location(self) -> str | None:
        """``sglang/srt/server_args.py:3521 in _handle_speculative_decoding`` or None."""
        return self.origin.where() if self.origin else None

    def summary(self) -> str:
        """One line for humans."""
        if self.status == "passed":
            return f"passed ({self.version}, {self.hardware or 'this machine'})"
        if self.status == "raised":
            return f"raised {self.exception_type} at {self.location}: {self.message}"
        if self.status == "argparse_error":
            return f"argparse error: {self.message}"
        return f"harness error: {self.harness_reason}"


def frame_of(raw: Any) -> Frame | None:
    """A child's raw frame (a dict with ``path``) as a :class:`Frame`; None when it is not one."""
    if not isinstance(raw, dict) or "path" not in raw:
        return None
    return Frame(
        kind=str(raw.get("kind", "sglang")),
        path=str(raw["path"]),
        line=raw.get("line"),
        function=str(raw.get("function", "")),
        code=str(raw.get("code", "")),
    )


def to_result(raw: dict[str, Any], base: dict[str, Any], tree: Path | None = None) -> ReplayResult:
    """A child's raw answer as a :class:`ReplayResult`; with the release ``tree``, its
    exception text is vetted first (:func:`service.replay.messages.vet`)."""
    if tree is not None:
        raw = vet(raw, tree)
    setup = raw.get("setup") or {}
    timings = {**(setup.get("timings") or {}), **(raw.get("timings") or {})}
    all_frames = [f for f in (frame_of(x) for x in raw.get("all_frames") or []) if f]
    status = raw.get("status") or "harness_error"
    if status not in ("passed", "raised", "harness_error", "argparse_error"):
        status = "harness_error"
    reason = raw.get("harness_reason")
    if status == "harness_error" and not reason:
        reason = "the replay produced no verdict"
    return ReplayResult(
        **base,
        status=status,
        ran=raw.get("ran"),
        phase=raw.get("phase"),
        exception_type=raw.get("exception_type"),
        message=raw.get("message"),
        frames=[f for f in (frame_of(x) for x in raw.get("frames") or []) if f],
        origin=frame_of(raw.get("sglang_origin")) if status == "raised" else None,
        raised_at=all_frames[-1] if all_frames else None,
        harness_reason=reason if status == "harness_error" else None,
        usage=raw.get("usage"),
        server_args=raw.get("server_args"),
        startup=raw.get("probe") if isinstance(raw.get("probe"), dict) else None,
        probe_disagreements=setup.get("probe_disagreements")
        or raw.get("probe_disagreements")
        or {},
        stubs_served=raw.get("stubs_served") or [],
        shims=setup.get("shims") or raw.get("shims") or [],
        timings={k: round(float(v), 3) for k, v in timings.items()},
    )
