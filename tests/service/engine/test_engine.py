"""The triage engine end to end, on real releases and logs rendered from them."""

from __future__ import annotations

import pytest

from evals.render import render_log
from kb.code_types import Check
from service.engine.triage import Engine

SEED_BASE = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/Kimi-K2.6-eagle3",
]
ATTEMPT_1 = SEED_BASE + ["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
ATTEMPT_2 = SEED_BASE + ["--speculative-num-draft-tokens", "8"]


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _seed_check(kb, release: str) -> Check:
    fn = (
        "ServerArgs._handle_speculative_decoding" if release != "0.5.23" else "_handle_eagle_family"
    )
    return next(
        c
        for c in kb.store.checks(release, function=fn)
        if c.bare and "speculative_eagle_topk is None" in c.condition
    )


def _fix_sets(result) -> list[tuple[frozenset, frozenset]]:
    return [(frozenset(f.remove), frozenset(f.set.items())) for f in result.fixes]


@pytest.mark.parametrize(
    "argv, must_drop",
    [
        (ATTEMPT_1, {"--speculative-eagle-topk", "--speculative-num-draft-tokens"}),
        (ATTEMPT_2, {"--speculative-num-draft-tokens"}),
    ],
)
def test_seed_attempts_on_0_5_11(kb, engine, argv, must_drop) -> None:
    check = _seed_check(kb, "0.5.11")
    log = render_log(kb.store, "0.5.11", check, python="3.12", argv=argv)
    result = engine.triage(log, release="0.5.11", hardware="rtx-pro-6000-x8")
    assert result.status == "located"
    assert result.location.function == "ServerArgs._handle_speculative_decoding"
    assert (result.location.start_line, result.location.end_line) == (3519, 3522)
    assert result.check.bare and result.check.kind == "assert"
    assert result.evaluation.fired == "true"
    failing = [a for a in result.evaluation.atoms if a.failing]
    assert any(
        a.text == "self.speculative_num_draft_tokens is None"
        and a.inputs[0].value == 8
        and a.inputs[0].source == "flag"
        for a in failing
    )
    fixes = _fix_sets(result)
    # fix 1 adds the missing companion --speculative-num-steps and keeps every size the user
    # gave; dropping the sizes, and steps/topk/draft 3/1/4 explicitly, are offered too
    assert (frozenset(must_drop), frozenset()) in fixes
    assert (
        frozenset(),
        frozenset(
            {
                ("--speculative-num-steps", 3),
                ("--speculative-eagle-topk", 1),
                ("--speculative-num-draft-tokens", 4),
            }
        ),
    ) in fixes
    top = result.fixes[0]
    assert top.recommended and top.fixes_check == "true" and not top.trips
    assert "--speculative-algorithm EAGLE3" in top.command
    assert not top.remove and "--speculative-num-steps" in top.set
    assert top.keeps_features and any(e.startswith("+ --speculative-num-steps") for e in top.edits)
    for flag in must_drop:  # the user's sizes are kept, with the user's values
        given = argv[argv.index(flag) + 1]
        assert (
            top.argv[top.argv.index(flag) + 1] == given and str(top.set.get(flag, given)) == given
        )
    assert top.command.startswith("python3 -m sglang.launch_server")
    assert "0.5.11:sglang/srt/server_args.py:3519-3522" in result.explanation
    assert len(result.summary.split()) < 30


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13"])
def test_each_python_reports_a_line_that_maps_to_the_same_check(kb, engine, python) -> None:
    check = _seed_check(kb, "0.5.11")
    log = render_log(kb.store, "0.5.11", check, python=python, argv=ATTEMPT_1)
    result = engine.triage(log, release="0.5.11")
    assert result.check.id == check.id
    assert result.location.method == "frame_line"
    assert result.parsed.python == python


def test_same_flags_on_0_5_23_land_in_the_eagle_family_hook(kb, engine) -> None:
    check = _seed_check(kb, "0.5.23")
    log = render_log(kb.store, "0.5.23", check, python="3.12", argv=ATTEMPT_1)
    result = engine.triage(log)
    assert result.release.release == "0.5.23"
    assert result.location.path == "sglang/srt/arg_groups/speculative_hook.py"
    assert result.location.function == "_handle_eagle_family"
    assert result.evaluation.fired in ("true", "unknown")
    drop = {"--speculative-eagle-topk", "--speculative-num-draft-tokens"}
    assert (frozenset(drop), frozenset()) in _fix_sets(result)


def test_dev_build_lines_off_by_12_to_79_resolve_to_nearest_0_5_11(kb, engine) -> None:
    check = _seed_check(kb, "0.5.11")
    log = render_log(kb.store, "0.5.11", check, python="3.12", argv=ATTEMPT_1, line_offset=79)
    log = "sglang 0.5.12.dev210+gedff717ef\n" + log
    result = engine.triage(log, hardware="rtx-pro-6000-x8")
    assert result.release.release == "0.5.11"
    assert result.release.dev_build is True
    assert "nearest release 0.5.11" in (result.release.note or "")
    assert result.check.id == check.id
    assert result.fixes and result.fixes[0].fixes_check == "true"


def test_argparse_spelling_error_gets_the_dash_spelling(engine) -> None:
    log = (
        "$ python -m sglang.launch_server --model-path /moonshotai/Kimi-K2-Thinking --tp 8 "
        "--reasoning_parser kimi_k2\n"
        "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2\n"
    )
    result = engine.triage(log, release="0.5.11")
    assert result.status == "argparse"
    fix = result.fixes[0]
    assert "--reasoning-parser" in fix.argv and "--reasoning_parser" not in fix.argv
    assert fix.argv[fix.argv.index("--reasoning-parser") + 1] == "kimi_k2"
    assert result.citations and result.citations[0].startswith("0.5.11:sglang/srt/server_args.py:")


@pytest.mark.parametrize(
    ("line", "want_set", "want_remove"),
    [
        (
            "unrecognized arguments: --tool_call_parser qwen25",
            {"--tool-call-parser": "qwen25"},
            ["--tool_call_parser qwen25"],  # the edit line shows the value it had
        ),
        (
            "argument --attention-backend: invalid choice: 'flashinfr' (choose from "
            "'triton', 'torch_native', 'flashinfer', 'fa3')",
            {"--attention-backend": "flashinfer"},
            [],
        ),
    ],
)
def test_an_argparse_line_alone_gets_the_fix_of_the_tokens_it_shows(
    engine, line: str, want_set: dict, want_remove: list
) -> None:
    """No command in the log: the fix is of the tokens the error line shows, its edit lines
    say what to change, and it is not offered as a whole command."""
    result = engine.triage(f"launch_server.py: error: {line}\n", release="0.5.23")
    assert result.status == "argparse"
    (fix,) = result.fixes
    assert (fix.set, fix.remove) == (want_set, [r.split()[0] for r in want_remove])
    assert fix.command_complete is False and fix.recommended
    assert fix.edits == [f"- {f}" for f in want_remove] + [
        f"+ {k} {v}" for k, v in want_set.items()
    ]


def test_message_only_value_error_finds_the_raise(kb, engine) -> None:
    log = "ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding.\n"
    result = engine.triage(
        {
            "log": log,
            "release": "0.5.11",
            "command": "--attention-backend trtllm_mha --speculative-algorithm EAGLE "
            "--speculative-eagle-topk 4 --model-path /m/Llama-3.1-8B",
        }
    )
    assert result.location.method == "message"
    assert result.check.kind == "raise" and result.check.exc_type == "ValueError"
    assert "trtllm_mha backend only supports topk = 1" in result.check.message
    assert result.location.function.startswith("ServerArgs.")
    assert any(
        "--speculative-eagle-topk" in f.set
        or "--speculative-eagle-topk" in f.remove
        or "--attention-backend" in f.set
        or "--attention-backend" in f.remove
        for f in result.fixes
    )


def test_hardware_changes_the_verdict(kb, engine) -> None:
    check = next(
        c
        for c in kb.store.checks(
            "0.5.11", function="ServerArgs._handle_attention_backend_compatibility"
        )
        if "prefill is only supported on Blackwell" in (c.message or "")
    )
    argv = ["--model-path", "/models/Llama-3.1-8B-Instruct", "--attention-backend", "trtllm_mha"]
    log = render_log(kb.store, "0.5.11", check, python="3.12", argv=argv)
    on_rtx = engine.triage(log, release="0.5.11", hardware="rtx-pro-6000-x8")
    on_b200 = engine.triage(log, release="0.5.11", hardware="b200-x8")
    assert on_rtx.check.id == on_b200.check.id == check.id
    assert on_rtx.evaluation.fired == "true"
    assert on_b200.evaluation.fired == "false"
    assert on_b200.unknowns and on_b200.unknowns[0].what == "why the check fired"
    assert on_rtx.confidence > on_b200.confidence


def test_every_citation_exists_in_the_kb(kb, engine) -> None:
    check = _seed_check(kb, "0.5.11")
    result = engine.triage(render_log(kb.store, "0.5.11", check, argv=ATTEMPT_1), release="0.5.11")
    for cite in result.citations:
        release, path, span = cite.split(":")
        first = int(span.split("-")[0])
        assert kb.store.file_lines(release, path, first, first), cite


def test_the_engine_collects_garbage_less_often(engine) -> None:
    """An engine runs with the collector's thresholds raised (``cache.tune_gc``): the young
    generation is scanned every 20,000 allocations, not every 700."""
    import gc

    from service.engine.cache import GC_THRESHOLDS

    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700
