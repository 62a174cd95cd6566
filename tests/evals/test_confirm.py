"""Replay verdicts folded into generated incidents (evals/confirm.py), on synthetic results."""

from __future__ import annotations

from evals.confirm import fires_expected_check, judge
from evals.incidents import Expected, ExpectedLocation, FixSpec, Incident
from service.replay.results import Frame, ReplayResult

PATH = "sglang/srt/server_args.py"


def _incident(
    last_line: str = "[2025-06-26 23:32:32] AssertionError: tp_size must be divisible",
    fixes: int = 2,
) -> Incident:
    return Incident(
        id="gen-x",
        source="generated:seed=0",
        release="0.5.9",
        hardware="h100-x8",
        command=["--model-path", "m", "--tp", "2", "--moe-dp-size", "4"],
        crash_log=f'Traceback (most recent call last):\n  File "x", line 1\n{last_line}\n',
        expected=Expected(
            release="0.5.9",
            location=ExpectedLocation(
                path=PATH,
                function="ServerArgs._handle_context_parallelism",
                start_line=2096,
                end_line=2098,
            ),
            root_cause_flags=["--moe-dp-size"],
            acceptable_fixes=[FixSpec(remove=["--moe-dp-size"]), FixSpec(set={"--tp": 4})][:fixes],
        ),
        category="parallelism",
    )


def _raised(
    line: int, exc: str = "AssertionError", message: str = "", path: str = PATH
) -> ReplayResult:
    origin = Frame(path=path, line=line, function="_handle_context_parallelism")
    return ReplayResult(
        status="raised",
        version="0.5.9",
        argv=[],
        exception_type=exc,
        message=message,
        origin=origin,
        frames=[origin],
    )


def _passed() -> ReplayResult:
    return ReplayResult(status="passed", version="0.5.9", argv=[])


def test_reproduced_crash_and_holding_fixes_are_confirmed() -> None:
    inc = _incident()
    out = judge(
        inc,
        _raised(2097, message="tp_size must be divisible"),
        [_passed(), _raised(4000, "ValueError")],
        "replay:0.5.9:h100-x8",
    )
    assert out is not None and out.confirmed_by == "replay:0.5.9:h100-x8"
    assert out.expected.acceptable_fixes == inc.expected.acceptable_fixes  # elsewhere = holds
    assert out.crash_log == inc.crash_log and "2/2 fixes hold" in out.notes


def test_a_fix_that_still_fires_the_check_is_dropped() -> None:
    out = judge(_incident(), _raised(2096), [_raised(2098), _passed()], "replay:0.5.9:h100-x8")
    assert out is not None
    assert out.expected.acceptable_fixes == [FixSpec(set={"--tp": 4})]


def test_not_confirmed_when_replay_disagrees() -> None:
    inc = _incident()
    label = "replay:0.5.9:h100-x8"
    assert judge(inc, _raised(2500), [_passed(), _passed()], label) is None  # another check
    assert judge(inc, _raised(2097, "ValueError"), [_passed(), _passed()], label) is None
    assert judge(inc, _passed(), [_passed(), _passed()], label) is None
    harness = ReplayResult(status="harness_error", version="0.5.9", argv=[], harness_reason="stub")
    assert judge(inc, harness, [_passed(), _passed()], label) is None
    # every fix refused (still fires / harness error): the ground truth is not confirmed
    assert judge(inc, _raised(2097), [_raised(2097), harness], label) is None


def test_the_log_gets_sglangs_real_message() -> None:
    inc = _incident()
    out = judge(
        inc,
        _raised(2097, message="tp_size must be divisible by moe_dp_size"),
        [_passed(), _passed()],
        "replay:0.5.9:h100-x8",
    )
    assert out is not None
    assert out.crash_log.endswith(
        "[2025-06-26 23:32:32] AssertionError: tp_size must be divisible by moe_dp_size\n"
    )
    assert "real message" in out.notes
    bare = _incident("AssertionError")
    kept = judge(bare, _raised(2097), [_passed(), _passed()], "replay:0.5.9:h100-x8")
    assert kept is not None and kept.crash_log == bare.crash_log


def test_location_match_needs_path_and_line_range() -> None:
    inc = _incident()
    assert fires_expected_check(_raised(2098), inc)
    assert not fires_expected_check(_raised(2099), inc)
    assert not fires_expected_check(_raised(2097, path="sglang/srt/other.py"), inc)


def test_refusal_says_why() -> None:
    from evals.confirm import refusal

    inc = _incident()
    assert "raised AssertionError at sglang/srt/server_args.py:2500" in refusal(
        inc, _raised(2500), [_passed(), _passed()]
    )
    assert "the log shows AssertionError" in refusal(inc, _raised(2097, "ValueError"), [])
    assert refusal(inc, _raised(2097), [_raised(2097), _raised(2096)]).startswith(
        "no acceptable fix holds"
    )
