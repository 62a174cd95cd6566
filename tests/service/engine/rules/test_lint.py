"""Lint: the seed command, checked fixes, and the CLI / HTTP glue."""

from __future__ import annotations

import json

import pytest

from kb.errors import ConfigError, ReleaseNotIngested
from kb.store import Store
from service.cli.lint import lint_command
from service.engine.rules.lint import lint
from service.engine.rules.payloads import lint_payload, rules_payload, split_command

SEED = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/d",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]
SEED_CITATION = "0.5.11:sglang/srt/server_args.py:ServerArgs._handle_speculative_decoding:3519-3522"


def test_lint_flags_the_seed_assert_with_a_verified_fix(store: Store) -> None:
    report = lint(store, "0.5.11", SEED, hardware="rtx-pro-6000-x8")
    assert not report.ok
    assert report.model_arch == "KimiK25ForConditionalGeneration"  # guessed from the path
    finding = next(f for f in report.violated if SEED_CITATION in f.citations)
    assert finding.severity == "error" and finding.origin == "derived"
    best = finding.fixes[0]
    assert best.verified and best.card_after in ("satisfied", "not_applicable")
    assert set(best.remove) == {"--speculative-eagle-topk", "--speculative-num-draft-tokens"}
    assert "--speculative-eagle-topk" not in best.argv
    assert best.command.startswith("python -m sglang.launch_server --model-path /models/Kimi-K2.6")
    # the fixed command lints clean
    assert lint(store, "0.5.11", best.argv, hardware="rtx-pro-6000-x8").ok
    # dropping only one of the two flags is not a fix, and is ranked below the clean one
    partial = [f for f in finding.fixes if f.remove == ["--speculative-eagle-topk"]]
    assert all(not f.verified and f.card_after == "violated" for f in partial)


def test_lint_demotes_a_fix_that_trips_another_card(store: Store, monkeypatch) -> None:
    """A hint that satisfies its own card but makes a derived card fail is not 'verified'."""
    from kb.rules.cards import Card, load_curated
    from service.engine.rules import release_cards

    probe = Card(
        id="c-test-explicit-steps",
        title="say --speculative-num-steps with topk",
        releases="==0.5.11",
        when="args.speculative_eagle_topk is not None",
        require="args.speculative_num_steps is not None",
        severity="warning",
        message="m",
        citations=[SEED_CITATION],
        origin="curated",
        fix_hints={"set": {"--speculative-num-steps": 3, "--page-size": 16}},
    )
    monkeypatch.setattr(release_cards, "load_curated", lambda: [*load_curated(), probe])
    # the hint's --page-size 16 with topk 4 on triton makes the page-size card fail
    argv = SEED + ["--attention-backend", "triton"]
    report = lint(store, "0.5.11", argv, hardware="rtx-pro-6000-x8")
    finding = next(f for f in report.violated if f.rule == probe.id)
    hint = next(f for f in finding.fixes if f.origin == "card fix_hints")
    assert hint.card_after == "satisfied" and hint.trips and not hint.verified
    page = next(
        c
        for c in release_cards.cards_for(store, "0.5.11")
        if any("ServerArgs._handle_speculative_decoding:3553-3555" in x for x in c.citations)
    )
    assert page.id in hint.trips and page.id in hint.note
    assert finding.fixes.index(hint) > 0 or not any(f.verified for f in finding.fixes)


def test_lint_reports_unknowns_and_warnings(store: Store) -> None:
    argv = [
        "--model-path",
        "/models/m",
        "--attention-backend",
        "trtllm_mha",
        "--page-size",
        "128",
        "--tp",
        "4",
        "--enable-dp-attention",
        "--stream-output",
    ]
    report = lint(store, "0.5.11", argv)
    rules = {f.rule: f for f in report.violated}
    assert {
        "c-trtllm-mha-page-size",
        "c-dp-attention-reset-dp1",
        "c-deprecated-stream-output",
    } <= set(rules)
    assert all(
        rules[r].severity == "warning"
        for r in ("c-trtllm-mha-page-size", "c-deprecated-stream-output")
    )
    dep = rules["c-deprecated-stream-output"].fixes[0]
    assert dep.verified and "--incremental-streaming-output" in dep.argv
    assert "--stream-output" not in dep.argv
    unknown = {f.rule: f for f in report.unknown}
    assert "c-trtllm-mha-prefill-sm100-0511" in unknown
    assert "is_sm100_supported()" in unknown["c-trtllm-mha-prefill-sm100-0511"].unknowns
    on_b200 = lint(store, "0.5.11", argv, hardware="b200-x8")
    assert "c-trtllm-mha-prefill-sm100-0511" not in {f.rule for f in on_b200.unknown}


def test_split_command() -> None:
    assert split_command("python -m sglang.launch_server --tp 8") == ["--tp", "8"]
    assert split_command("sglang serve --model-path 'a b'") == ["--model-path", "a b"]
    assert split_command(["--tp", "8"]) == ["--tp", "8"]


def test_lint_payload(store: Store) -> None:
    body = {
        "release": "0.5.11",
        "command": "python -m sglang.launch_server " + " ".join(SEED),
        "hardware": "rtx-pro-6000-x8",
    }
    out = lint_payload(store, body)
    json.dumps(out)
    assert out["ok"] is False and out["argv"] == SEED
    assert any(SEED_CITATION in f["citations"] for f in out["violated"])
    with pytest.raises(ConfigError):
        lint_payload(store, {"release": "0.5.11"})
    with pytest.raises(ConfigError):
        lint_payload(store, {"release": "0.5.11", "flags": SEED, "hardware": "tpu-v9"})
    with pytest.raises(ReleaseNotIngested):
        lint_payload(store, {"release": "0.4.0", "flags": SEED})


def test_rules_payload(store: Store) -> None:
    out = rules_payload(store, release="0.5.23", origin="curated")
    ids = [c["id"] for c in out["cards"]]
    assert "c-dsv4-nextn-raw-string" in ids and "c-dp-attention-reset-dp1" not in ids
    assert out["count"] == len(ids)
    derived = rules_payload(store, origin="derived", q="trtllm_mha", limit=5)
    assert derived["count"] >= 2 and len(derived["cards"]) <= 5
    assert all(c["origin"] == "derived" for c in derived["cards"])


def test_lint_command(store: Store, kb, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRIAGE_KB_DIR", str(kb.root))
    code = lint_command(
        "0.5.11",
        "rtx-pro-6000-x8",
        None,
        ["python", "-m", "sglang.launch_server", *SEED],
        as_json=False,
    )
    text = capsys.readouterr().out
    assert code == 1 and "would fail" in text and "fix (verified" in text
    code = lint_command("0.5.11", None, None, SEED, as_json=True)
    assert code == 1 and json.loads(capsys.readouterr().out)["release"] == "0.5.11"
    assert lint_command("0.5.11", None, None, ["--model-path", "/models/m"], as_json=True) == 0
    assert lint_command("0.4.0", None, None, SEED, as_json=False) == 2
