"""Folding replay results into a stored triage (:func:`service.replay.background.summarise`)."""

from __future__ import annotations

from service.replay.background import summarise
from service.replay.results import Frame, ReplayResult

CHECK = {"path": "sglang/srt/server_args.py", "start_line": 3519, "end_line": 3522}
DEVICE = Frame(path="sglang/srt/utils/common.py", line=1942, function="get_device")


def _raised(frame: Frame, exc: str = "AssertionError") -> ReplayResult:
    return ReplayResult(
        status="raised", version="0.5.11", argv=[], exception_type=exc, frames=[frame], origin=frame
    )


def _triage(n_fixes: int) -> dict:
    return {"location": dict(CHECK), "fixes": [{"command": f"fix {i}"} for i in range(n_fixes)]}


def test_the_same_check_is_reproduced_and_fixes_verified() -> None:
    at_check = _raised(
        Frame(path=CHECK["path"], line=3520, function="_handle_speculative_decoding")
    )
    passed = ReplayResult(status="passed", version="0.5.11", argv=[])
    out = summarise(
        [at_check, passed, _raised(DEVICE, "RuntimeError")], _triage(2), "0.5.11", "rtx-pro-6000-x8"
    )
    assert out["replay"]["status"] == "reproduced"
    assert [f["replay"]["status"] for f in out["fixes"]] == ["verified", "next_failure"]


def test_without_hardware_a_stop_before_the_check_is_unverified_not_a_verdict() -> None:
    """On this CPU-only machine, a replay with no hardware profile stops at device
    detection: that is no "different failure" of the user's command, nor a next
    failure of the fixes that stop there too."""
    other = _raised(Frame(path="sglang/srt/server_args.py", line=900, function="_handle_gpu"))
    out = summarise(
        [_raised(DEVICE, "RuntimeError"), _raised(DEVICE, "RuntimeError"), other],
        _triage(2),
        "0.5.11",
        None,
    )
    assert out["replay"]["status"] == "unverified"
    assert "give the hardware" in out["replay"]["detail"]
    assert out["replay"]["location"] == DEVICE.where()
    assert [f["replay"]["status"] for f in out["fixes"]] == ["unverified", "next_failure"]
    # with a hardware profile the same outcome is SGLang's verdict on that machine
    out = summarise([_raised(DEVICE, "RuntimeError")], _triage(0), "0.5.11", "h100-x8")
    assert out["replay"]["status"] == "different_failure"
