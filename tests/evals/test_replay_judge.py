"""Replay's judge for a log without its command (a frameless variant): the recommended
fix's edits are applied to the command the launch really ran and replayed on its release."""

from __future__ import annotations

import pytest

from evals.incidents import INCIDENTS_DIR, load_incidents
from evals.replay_check import judge


@pytest.fixture(scope="module")
def incident():
    """A shipped 0.5.9 incident with a one-flag drop among its replay-confirmed fixes."""
    incs = load_incidents([INCIDENTS_DIR / "generated.jsonl"])
    return next(
        i
        for i in incs
        if i.release == "0.5.9"
        and i.hardware
        and any(f.remove and not f.set for f in i.expected.acceptable_fixes)
    )


def _answer(incident, set_: dict | None = None, remove: list | None = None) -> dict:
    """The engine's answer to the frameless log, as JSON: no command parsed."""
    fixes = [{"recommended": True, "set": set_ or {}, "remove": remove or [], "argv": []}]
    return {
        "status": "located",
        "release": {"release": "0.5.23"},  # the range's newest: not where the user runs
        "location": {"path": "sglang/srt/server_args.py"},
        "parsed": {
            "command": None,
            "hardware": incident.hardware,
            "model_arch": incident.model_arch,
        },
        "fixes": fixes if (set_ or remove) is not None else [],
    }


def test_the_fix_is_replayed_on_the_command_the_launch_ran(incident, kb_settings) -> None:
    real = {"argv": incident.command_argv(), "release": incident.release}
    drop = next(f for f in incident.expected.acceptable_fixes if f.remove and not f.set)
    out = judge(_answer(incident, remove=list(drop.remove)), kb_settings, real)
    assert out["fix_replay"] == "passed", out
    assert f"in {incident.release}" in out["detail"]
    # without the real command the same answer cannot be judged (nothing to apply it to)
    assert judge(_answer(incident, remove=list(drop.remove)), kb_settings)["fix_replay"] is None


def test_a_fix_that_leaves_the_crash_or_changes_nothing_fails(incident, kb_settings) -> None:
    real = {"argv": incident.command_argv(), "release": incident.release}
    # dropping the model path changes the command, and SGLang still refuses it
    out = judge(_answer(incident, remove=["--model-path"]), kb_settings, real)
    assert out["fix_replay"] == "failed", out
    # dropping a flag the command does not have is no edit
    out = judge(_answer(incident, remove=["--enable-lora"]), kb_settings, real)
    assert (out["fix_replay"], out["detail"]) == (
        "failed",
        "the fix does not change the command",
    )
    out = judge(_answer(incident), kb_settings, real)
    assert (out["fix_replay"], out["detail"]) == ("failed", "no fix recommended")
    # a flag the release answered from has and the user's release lacks
    out = judge(_answer(incident, set_={"--no-such-flag-anywhere": 1}), kb_settings, real)
    assert out["fix_replay"] == "failed" and out["detail"].startswith("not a flag of 0.5.9")


def test_without_hardware_a_stop_any_launch_makes_is_no_verdict(kb_settings) -> None:
    """An argparse answer (the command never reached validation) without hardware: the
    renamed flag's command stops where a bare launch of the model stops on this CPU-only
    machine, which says nothing of the fix; a fix argparse still refuses fails."""
    argv = ["--model-path", "/models/m", "--tp-size", "1", "--enable_metrics"]

    def answer(fixed: list[str]) -> dict:
        return {
            "status": "argparse",
            "release": {"release": "0.5.9"},
            "location": None,
            "parsed": {"command": argv, "hardware": None, "model_arch": "LlamaForCausalLM"},
            "fixes": [{"recommended": True, "set": {}, "remove": [], "argv": fixed}],
        }

    renamed = [*argv[:-1], "--enable-metrics"]
    out = judge(answer(renamed), kb_settings)
    assert out["fix_replay"] is None and "bare launch" in out["detail"], out
    out = judge(answer([*argv[:-1], "--enable_metrics"]), kb_settings)
    assert out["fix_replay"] == "failed", out
