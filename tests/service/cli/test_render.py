"""The CLI's rendering of a triage: copyable commands at any width, edits, rule, facts, search."""

from __future__ import annotations

import shlex
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from service.cli.render import render_fix, render_result
from service.engine import Engine, FixOut, TriageResult
from service.engine.answer import HardwareSource, ModelFact, UpgradeFix

SEED_LOG = (Path(__file__).resolve().parents[3] / "examples" / "seed_attempt1.log").read_text()


@pytest.fixture(scope="module")
def seed(kb) -> TriageResult:
    return Engine(kb).triage(SEED_LOG, release="0.5.11", hardware="rtx-pro-6000-x8")


def _printed(render, width: int, terminal: bool = False) -> list[str]:
    buf = StringIO()
    console = Console(
        file=buf, width=width, force_terminal=terminal, color_system=None, legacy_windows=False
    )
    render(console)
    return buf.getvalue().splitlines()


def _prefix(fix: FixOut) -> list[str]:
    return shlex.split(fix.command[: len(fix.command) - len(shlex.join(fix.argv))])


@pytest.mark.parametrize("terminal", [False, True])
def test_each_command_is_one_line_that_pastes_back_to_its_argv(
    seed: TriageResult, terminal: bool
) -> None:
    assert seed.fixes and len(seed.fixes[0].command) > 60
    lines = _printed(lambda c: render_result(seed, c), 60, terminal)
    for fix in seed.fixes[:3]:
        prefix = _prefix(fix)
        assert prefix[-2:] == ["-m", "sglang.launch_server"]
        pasted = [line for line in lines if line.startswith(fix.command[:20])]
        assert pasted, fix.command
        assert any(shlex.split(line) == prefix + fix.argv for line in pasted)
    assert max(len(line) for line in lines if not line.startswith("python")) <= 60


def test_edits_come_before_the_command_and_the_rule_is_shown(seed: TriageResult) -> None:
    lines = _printed(lambda c: render_result(seed, c), 100)
    text = "\n".join(lines)
    fix = seed.fixes[0]
    at = lines.index(fix.command)
    heading = max(i for i, line in enumerate(lines[:at]) if line.startswith(f"fix {fix.rank}"))
    shown = [line.strip() for line in lines[heading + 1 : at]]
    assert shown[: len(fix.edits or [])] == list(fix.edits) or all(
        e.startswith(("+ ", "- ")) for e in shown if not e.startswith("gives up")
    )
    assert seed.rule and "rule: In 0.5.11" in text
    assert "`--speculative-eagle-topk`" in text and "self." not in text.split("rule:", 1)[1][:600]


def test_derived_edits_gives_up_facts_and_search() -> None:
    fix = FixOut(
        rank=1,
        set={"--speculative-num-steps": 3, "--enable-dp-attention": True},
        remove=["--dp"],
        argv=[
            "--model-path",
            "/m",
            "--json-model-override-args",
            '{"a": [1, 2]}',
            "--speculative-num-steps",
            "3",
        ],
        command="sglang serve --model-path /m --json-model-override-args "
        "'{\"a\": [1, 2]}' --speculative-num-steps 3",
        origin="test",
        fixes_check="true",
        verdict="fixes the check [x]",
        gives_up="data parallel attention over 3 ranks",
    )
    lines = _printed(lambda c: render_fix(fix, c), 40)
    assert lines[1:4] == ["  - --dp", "  + --speculative-num-steps 3", "  + --enable-dp-attention"]
    assert (
        " ".join(" ".join(lines[4:-1]).split()) == "gives up: data parallel attention over 3 ranks"
    )
    assert shlex.split(lines[-1]) == ["sglang", "serve", *fix.argv]  # unwrapped at 40 columns
    assert "[x]" in lines[0]  # log text is never read as markup
    result = TriageResult(
        status="located",
        summary="s",
        explanation="",
        confidence=0.5,
        release={"release": "0.5.11", "confidence": 1.0, "method": "explicit"},
        parsed={},
        fixes=[fix],
        model_facts=[ModelFact(name="quantization", value="fp8", source="config.json")],
        fix_search={
            "status": "verified",
            "candidates": 3,
            "seconds": 41.2,
            "detail": "verified by replay on 0.5.11 with rtx-pro-6000-x8",
        },
    )
    text = "\n".join(_printed(lambda c: render_result(result, c), 120))
    assert "Model: quantization=fp8 (config.json)" in text
    assert (
        "Fix search: verified by replay on 0.5.11 with rtx-pro-6000-x8 (3 replayed, 41 s)" in text
    )


def test_a_command_the_log_did_not_show_whole_is_not_printed_to_paste() -> None:
    fix = FixOut(
        rank=1,
        remove=["--enable-two-batch-overlap"],
        argv=[],
        command="python -m sglang.launch_server",
        command_complete=False,
        origin="test",
        fixes_check="true",
        verdict="fixes the check",
    )
    lines = _printed(lambda c: render_fix(fix, c), 200)
    assert lines[1] == "  - --enable-two-batch-overlap"  # from remove: the log did not show it
    assert not any(line.startswith("python") for line in lines)
    assert lines[-1].strip() == (
        "The log shows no full launch command: make the change above in yours."
    )


def test_hardware_source_is_shown_next_to_the_release() -> None:
    def head(hardware: HardwareSource | None) -> str:
        result = TriageResult(
            status="located",
            summary="s",
            explanation="",
            confidence=0.5,
            release={
                "release": "0.5.11",
                "method": "declared",
                "confidence": 1.0,
                "dev_build": False,
                "reported_version": None,
                "note": None,
            },
            parsed={},
            hardware=hardware,
        )
        return "\n".join(
            line.strip("│ ") for line in _printed(lambda c: render_result(result, c), 200)
        )

    gpu = "GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3"
    text = head(HardwareSource(name="h100-x8", source="log", evidence=gpu, detail="by GPU name"))
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("release 0.5.11"))
    assert lines[at + 1] == f'hardware: h100-x8 (from the log: "{gpu}")'
    long = head(HardwareSource(name="h100-x8", source="log", evidence="GPU 0: " + "x" * 300))
    shown = next(line for line in long.splitlines() if line.startswith("hardware:"))
    assert (
        shown.endswith('...")') and len(shown) < len('hardware: h100-x8 (from the log: "")') + 121
    )
    assert "hardware: b200-x8 (declared)" in head(HardwareSource(name="b200-x8", source="request"))
    assert "hardware:" not in head(None)


UPGRADE = UpgradeFix(
    release="0.5.23",
    status="removed",
    sure=True,
    note="0.5.23 has no check with this condition or message",
    install='pip install "sglang==0.5.23"',
    command="python -m sglang.launch_server",
    citations=["0.5.11:sglang/srt/server_args.py:3519-3522"],
    not_checked=["the other checks of 0.5.23's start-up"],
)


def test_a_sure_upgrade_is_printed_before_the_flag_fixes() -> None:
    fix = FixOut(
        rank=1,
        argv=["--tp", "2"],
        command="python -m sglang.launch_server --tp 2",
        origin="o",
        fixes_check="true",
        verdict="clean",
        recommended=True,
        remove=["--tp"],
    )
    result = TriageResult(
        status="located",
        summary="s",
        explanation="",
        confidence=0.5,
        release={"release": "0.5.11", "confidence": 1.0, "method": "explicit"},
        parsed={},
        fixes=[fix],
        upgrade_fix=UPGRADE,
    )
    lines = [line.strip() for line in _printed(lambda c: render_result(result, c), 200)]
    at = lines.index('Upgrade first: pip install "sglang==0.5.23"')
    assert lines[at + 1] == "why: 0.5.23 has no check with this condition or message"
    assert lines[at + 2] == "cites: 0.5.11:sglang/srt/server_args.py:3519-3522"
    assert lines[at + 3] == "not checked: the other checks of 0.5.23's start-up"
    assert at < next(i for i, line in enumerate(lines) if line.startswith("fix 1"))
    unsure = result.model_copy(update={"upgrade_fix": UPGRADE.model_copy(update={"sure": False})})
    assert any(
        line.startswith("Upgrade may help:")
        for line in _printed(lambda c: render_result(unsure, c), 200)
    )
