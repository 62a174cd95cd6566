"""The Slack blocks show each fix's edit lines, what it gives up and its whole command, the
plain-words rule of a bare check, the model facts and the fix search (no KB needed)."""

from __future__ import annotations

import json

from service.engine import FixOut, TriageResult
from service.engine.answer import HardwareSource, ModelFact, UpgradeFix
from service.slack import blocks as sb

RULE = (
    "In 0.5.11, when `--speculative-num-steps` is not set, then `--speculative-eagle-topk` and "
    "`--speculative-num-draft-tokens` must both be unset; otherwise the assert at "
    "`0.5.11:sglang/srt/server_args.py:3519-3522` fails."
)
COMMAND = (
    "python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 "
    "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1"
)


def _fix(**kw: object) -> FixOut:
    base = dict(
        rank=1,
        set={"--speculative-num-steps": 3, "--speculative-eagle-topk": 1},
        remove=["--dp"],
        argv=COMMAND.split()[3:],
        command=COMMAND,
        origin="test",
        fixes_check="true",
        verdict="fixes the check",
        recommended=True,
    )
    return FixOut(**{**base, **kw})  # type: ignore[arg-type]


def _result(fix: FixOut) -> TriageResult:
    return TriageResult(
        status="located",
        summary="bare AssertionError in _handle_speculative_decoding",
        explanation="",
        confidence=0.9,
        release={"release": "0.5.11", "confidence": 1.0, "method": "explicit"},
        parsed={},
        fixes=[fix],
        rule=RULE,
        model_facts=[ModelFact(name="mla", value=True, source="known_model")],
        fix_search={
            "status": "verified",
            "candidates": 2,
            "seconds": 12.0,
            "detail": "verified by replay on 0.5.11 with rtx-pro-6000-x8",
        },
    )


def _texts(blocks: list[dict]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_fix_shows_edits_then_gives_up_then_the_command() -> None:
    fix = _fix(
        edits=[
            "+ --speculative-num-steps 3",
            "- --speculative-eagle-topk 4",
            "+ --speculative-eagle-topk 1",
        ],
        gives_up="top-k 4 <per step>",
    )
    text = sb.fix_text(fix)
    edits = text.index(
        "```+ --speculative-num-steps 3\n- --speculative-eagle-topk 4\n"
        "+ --speculative-eagle-topk 1```"
    )
    gives = text.index("_Gives up:_ top-k 4 &lt;per step&gt;")
    command = text.index(f"```{COMMAND}```")
    assert edits < gives < command


def test_edits_are_derived_from_set_and_remove_for_older_answers() -> None:
    text = sb.fix_text(_fix())
    assert "```- --dp\n+ --speculative-num-steps 3\n+ --speculative-eagle-topk 1```" in text
    assert "Gives up" not in text


def test_main_reply_has_the_rule_facts_and_search() -> None:
    fallback, blocks = sb.triage_blocks(_result(_fix(gives_up="nothing much")), None)
    text = _texts(blocks)
    assert "*Rule:* In 0.5.11, when `--speculative-num-steps` is not set" in text
    assert "Model: mla=True (known_model)" in text
    assert (
        "Fix search: verified by replay on 0.5.11 with rtx-pro-6000-x8 (2 replayed, 12 s)" in text
    )
    assert "_Gives up:_ nothing much" in text
    assert COMMAND in fallback
    _, check = sb.check_blocks(_result(_fix()))
    assert "Rule" not in _texts(check)  # no location: nothing to show
    _, fixes = sb.fixes_blocks(_result(_fix()))
    assert "Fix search: verified" in _texts(fixes)


def test_main_reply_shows_the_hardware_source_after_the_release_line() -> None:
    gpu = "GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3 <sm90>"
    result = _result(_fix()).model_copy(
        update={
            "hardware": HardwareSource(
                name="h100-x8", source="log", evidence=gpu, detail="by GPU name"
            )
        }
    )
    _, blocks = sb.triage_blocks(result, None)
    at = next(i for i, b in enumerate(blocks) if "release *0.5.11*" in _texts([b]))
    assert blocks[at + 1] == {
        "type": "context",
        "elements": [
            {
                "type": "mrkdwn",
                "text": (
                    'hardware: h100-x8 (from the log: "GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3 &lt;sm90&gt;")'
                ),
            }
        ],
    }
    declared = result.model_copy(
        update={"hardware": HardwareSource(name="b200-x8", source="request")}
    )
    assert "hardware: b200-x8 (declared)" in _texts(sb.triage_blocks(declared, None)[1])
    assert "hardware:" not in _texts(sb.triage_blocks(_result(_fix()), None)[1])


def test_main_reply_leads_with_a_sure_upgrade() -> None:
    up = UpgradeFix(
        release="0.5.23",
        status="passes",
        sure=True,
        note="your flags pass <it>",
        install='pip install "sglang==0.5.23"',
        command="c",
        citations=["0.5.11:a.py:1", "0.5.23:b.py:2"],
    )
    _, blocks = sb.triage_blocks(_result(_fix()).model_copy(update={"upgrade_fix": up}), None)
    texts = [_texts([b]) for b in blocks]
    at = next(i for i, t in enumerate(texts) if "Upgrade first" in t)
    assert blocks[at]["text"]["text"].splitlines() == [
        '*Upgrade first: pip install "sglang==0.5.23"*',
        "why: your flags pass &lt;it&gt;",
        "cites: 0.5.11:a.py:1, 0.5.23:b.py:2",
    ]
    assert at < blocks.index(sb.fix_blocks(_fix())[0])  # before the flag fix
    assert "Upgrade" not in _texts(sb.triage_blocks(_result(_fix()), None)[1])


def test_a_command_the_log_did_not_show_whole_is_not_offered_to_copy() -> None:
    partial = "python -m sglang.launch_server --moe-a2a-backend deepep"
    fix = _fix(
        set={"--moe-a2a-backend": "deepep"},
        remove=["--enable-two-batch-overlap"],
        argv=partial.split()[3:],
        command=partial,
        command_complete=False,
    )
    text = sb.fix_text(fix)
    assert "```- --enable-two-batch-overlap\n+ --moe-a2a-backend deepep```" in text
    assert f"```{partial}```" not in text
    assert "_The log shows no full launch command: make the change above in yours" in text
    fallback, _ = sb.triage_blocks(_result(fix), None)
    assert fallback.endswith("Fix: - --enable-two-batch-overlap + --moe-a2a-backend deepep")
