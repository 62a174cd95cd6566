"""The runner in-process and against a live HTTP service, and the scoring rules."""

from __future__ import annotations

import pytest

from evals.cli import eval_command
from evals.incidents import INCIDENTS_DIR, FixSpec, Incident, load_incidents
from evals.runner import request_for, run_eval
from evals.scoring import (
    Prediction,
    engine_root_cause,
    fix_matches,
    from_triage,
    grounded,
    score,
)
from kb.catalogs import load_catalog
from service.engine.triage import Engine
from tests.service.api.conftest import make_server


@pytest.fixture(scope="module")
def few() -> list[Incident]:
    incs = load_incidents()
    pick = ["seed-attempt-1", "public-sglang-12818", "public-sglang-36840"]
    gen = [i for i in incs if i.id.startswith("gen-0.5.23")][:2]
    return [i for i in incs if i.id in pick] + gen


def test_requests_never_carry_the_release(few) -> None:
    bodies = {i.id: request_for(i) for i in few}
    assert all("release" not in b for b in bodies.values())
    assert "command" not in bodies["seed-attempt-1"]  # the log holds it
    assert bodies["public-sglang-36840"]["command"].startswith("--tp-size 4")
    assert bodies["seed-attempt-1"]["hardware"] == "rtx-pro-6000-x8"


def test_http_and_in_process_agree(kb, kb_settings, few) -> None:
    local = run_eval(few, Engine(kb))
    with make_server(kb_settings) as srv:
        remote = run_eval(few, srv.url, kb=kb)
    assert remote.target == srv.url
    for a, b in zip(local.engine.incidents, remote.engine.incidents, strict=True):
        assert a.id == b.id and a.metrics == b.metrics and a.location == b.location
    assert remote.engine.aggregate["fix_match"] == local.engine.aggregate["fix_match"]


def test_unreachable_service_is_scored_as_errors(few) -> None:
    report = run_eval(few[:1], "http://127.0.0.1:9", timeout=2)
    s = report.engine.incidents[0]
    assert s.error and s.metrics["exact_location"] is False and s.metrics["grounded"] is None


def test_eval_command_prints_and_writes(kb_settings, tmp_path, kb) -> None:
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    rc = eval_command(
        [str(INCIDENTS_DIR / "seed.jsonl")],
        None,
        str(tmp_path / "out"),
        False,
        settings=kb_settings,
        console=Console(file=buf, width=200),
    )
    text = buf.getvalue()
    assert rc == 0 and "seed-attempt-2" in text and "release@1" in text
    assert (tmp_path / "out" / "metrics_by_category.png").is_file()
    assert (
        eval_command(
            [str(tmp_path / "missing.jsonl")],
            None,
            str(tmp_path),
            False,
            settings=kb_settings,
            console=Console(file=StringIO()),
        )
        == 2
    )


def test_fix_matching_compares_attributes_and_effects(kb) -> None:
    cat = load_catalog(kb.store, "0.5.11")
    cmd = [
        "--model-path",
        "/m",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        "8",
    ]
    acc = FixSpec(remove=["--speculative-eagle-topk", "--speculative-num-draft-tokens"])
    assert fix_matches(
        {"set": {}, "remove": ["--speculative-num-draft-tokens", "--speculative-eagle-topk"]},
        acc,
        cmd,
        cat,
    )
    assert not fix_matches({"set": {}, "remove": ["--speculative-eagle-topk"]}, acc, cmd, cat)
    steps = FixSpec(set={"--speculative-num-steps": 3})
    assert fix_matches({"set": {"--speculative-num-steps": "3"}, "remove": []}, steps, cmd, cat)
    # the same resulting command, spelled differently
    argv = [
        "--model-path",
        "/m",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps=3",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        "8",
    ]
    assert fix_matches({"set": {"x": 1}, "remove": [], "argv": argv}, steps, cmd, cat)
    assert not fix_matches({"set": {}, "remove": [], "argv": cmd}, steps, cmd, cat)


def test_root_cause_takes_the_innermost_piece_with_user_flags() -> None:
    def atom(text: str, role: str, failing: bool, name: str, source: str = "flag") -> dict:
        return {
            "text": text,
            "role": role,
            "failing": failing,
            "inputs": [{"name": name, "source": source}],
        }

    result = {
        "status": "located",
        "check": {
            "guards": [{"condition": "self.a and not self.b"}, {"condition": "self.b and self.c"}]
        },
        "evaluation": {
            "atoms": [
                atom("self.model_path.lower() in ['none']", "call_site", True, "model_path"),
                atom("self.a", "guard", True, "a"),
                atom("self.b", "guard", True, "b"),
                atom("self.b", "guard", True, "b"),
                atom("self.c", "guard", True, "c"),
                atom("self.d is None", "test", False, "d"),
            ]
        },
    }
    assert engine_root_cause(result) == ["b", "c"]  # the test's atom does not fail
    result["evaluation"]["atoms"][-1]["failing"] = True
    assert engine_root_cause(result) == ["d"]
    assert engine_root_cause(
        {
            "status": "argparse",
            "fixes": [{"remove": ["--reasoning_parser"], "set": {"--reasoning-parser": "x"}}],
        }
    ) == ["--reasoning_parser"]


def test_root_cause_follows_the_pieces_a_guard_on_a_local_expands_to() -> None:
    """``uses_x and cfg.mode != "null"`` is evaluated with the local's definition: its atoms
    (``cfg.dtype == 'nvfp4'``, ...) appear in no guard's text, and only the piece index each
    atom carries ties them to the guard that fired."""

    def atom(text: str, piece: int, failing: bool, name: str, role: str = "guard") -> dict:
        return {
            "text": text,
            "role": role,
            "failing": failing,
            "piece": piece,
            "inputs": [{"name": name, "source": "flag"}],
        }

    result = {
        "status": "located",
        "check": {
            "guards": [
                {"condition": "cfg.dtype not in ('nvfp4',)"},
                {"condition": 'uses_x and cfg.mode != "null"'},
            ]
        },
        "evaluation": {
            "atoms": [
                atom("cfg.model == 'm'", 0, True, "model", role="call_site"),
                atom("cfg.dtype not in ('nvfp4',)", 1, True, "dtype"),
                atom("cfg.dtype == 'nvfp4'", 2, True, "dtype"),
                atom("'trtllm_mha' in (cfg.decode,)", 2, True, "decode"),
                atom("cfg.mode != 'null'", 2, True, "mode"),
            ]
        },
    }
    assert engine_root_cause(result) == ["decode", "dtype", "mode"]
    for a in result["evaluation"]["atoms"]:  # a record without pieces: matched by text
        del a["piece"]
    assert engine_root_cause(result) == ["mode"]


def test_grounding_and_scoring_edges(kb) -> None:
    assert grounded(kb.store, ["0.5.11:sglang/srt/server_args.py:3519-3522"]) is True
    assert grounded(kb.store, ["0.5.11:sglang/srt/server_args.py:99999999"]) is False
    assert grounded(kb.store, ["9.9.9:sglang/srt/server_args.py:1"]) is False
    assert grounded(kb.store, []) is None
    inc = Incident.model_validate(
        {
            "id": "x",
            "source": "t",
            "crash_log": "E\n",
            "category": "other",
            "expected": {"release": "0.5.11", "no_flag_fix": "upgrade"},
        }
    )
    m = score(inc, Prediction(release="0.5.9", fixes=[], root_cause=[]), kb.store)
    assert m["release_at_1"] is False and m["no_fix_declined"] is True
    assert m["exact_location"] is None and m["rc_recall"] is None and m["fix_valid"] is None


def test_upgrade_said_is_scored_on_upgrade_incidents(kb) -> None:
    """``upgrade_said``: a sure upgrade, to the release the incident names when it names one."""

    def incident(no_fix: str | None) -> Incident:
        return Incident.model_validate(
            {
                "id": "u",
                "source": "t",
                "crash_log": "E\n",
                "category": "other",
                "expected": {"release": "0.5.11", "no_flag_fix": no_fix},
            }
        )

    sure = from_triage(
        {
            "status": "located",
            "release": {"release": "0.5.11"},
            "upgrade_fix": {"release": "0.5.23", "sure": True},
        }
    )
    unsure = from_triage(
        {
            "status": "located",
            "release": {"release": "0.5.11"},
            "upgrade_fix": {"release": "0.5.23", "sure": False},
        }
    )
    none = from_triage({"status": "located", "release": {"release": "0.5.11"}})
    assert score(incident("upgrade"), sure, kb.store)["upgrade_said"] is True
    assert score(incident("upgrade to ≥ 0.5.23"), sure, kb.store)["upgrade_said"] is True
    assert score(incident("upgrade to ≥ 0.5.21"), sure, kb.store)["upgrade_said"] is False
    assert score(incident("upgrade"), unsure, kb.store)["upgrade_said"] is False
    assert score(incident("upgrade"), none, kb.store)["upgrade_said"] is False
    assert score(incident("code bug"), sure, kb.store)["upgrade_said"] is None
    assert score(incident(None), sure, kb.store)["upgrade_said"] is None
    elsewhere = from_triage(
        {
            "status": "unlocated",
            "release": {"release": "0.5.11"},
            "not_flag_problem": {"kind": "raised_elsewhere", "package": "x"},
        }
    )
    assert score(incident("not a launch-flag problem"), elsewhere, kb.store)["not_flag_said"]
    assert score(incident("not a launch-flag problem"), none, kb.store)["not_flag_said"] is False
    assert score(incident("upgrade"), elsewhere, kb.store)["not_flag_said"] is None
