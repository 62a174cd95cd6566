"""Replay-generated family incidents (issue #27): a real replay of 0.5.23's start-up code
(the warm pool's worker, answers cached on disk) turns failing launches into incidents of
the ``block_shape`` and ``moe_runner_a2a`` families; each incident's location is the KB's
check, its log parses back to that check, and each acceptable fix is one the same probe
accepts. Plus the eval's replay judge on a check no probe reaches."""

from __future__ import annotations

import pytest

from evals.families.replayed import (
    HARDWARE,
    PROBES,
    a2a_fixes,
    block_fixes,
    family_checks,
    replayed_incidents,
)
from evals.incidents import Incident
from evals.replay_check import judge
from kb.catalogs import load_catalog
from service.engine import apply_edits, parse_log
from service.replay import StartupProbe, replay_startup

RELEASE = "0.5.23"


@pytest.fixture(scope="module")
def incidents(store, kb_settings) -> list[Incident]:
    return replayed_incidents(
        store,
        kb_settings,
        [RELEASE],
        max_launches=8,
        per_release={"block_shape": 2, "moe_runner_a2a": 2},
    )


def test_each_family_has_an_incident_at_its_check(incidents, store) -> None:
    assert {i.family for i in incidents} == {"block_shape", "moe_runner_a2a"}
    assert len({i.id for i in incidents}) == len(incidents)
    for inc in incidents:
        assert inc.source.startswith("generated:") and inc.release == RELEASE
        assert inc.confirmed_by == f"replay-probe:{RELEASE}:{HARDWARE}"
        assert inc.hardware == HARDWARE and inc.model and inc.model_arch and inc.command
        loc = inc.expected.location
        assert loc is not None and inc.expected.release == RELEASE
        checks = family_checks(store, RELEASE, inc.family or "")
        assert any(
            (c.path, c.function, c.start_line, c.end_line)
            == (loc.path, loc.function, loc.start_line, loc.end_line)
            for c in checks
        )
        # the log parses back to the command, the check's lines and SGLang's exception
        parsed = parse_log(inc.crash_log)
        assert parsed.command is not None and parsed.command[-len(inc.command) :] == inc.command
        primary = parsed.primary
        assert primary is not None and primary.frames
        inner = primary.frames[-1]
        assert inner.package_path == loc.path
        assert loc.start_line <= (inner.line or 0) <= (loc.end_line or loc.start_line)
        wanted = "ValueError" if inc.family == "block_shape" else "NotImplementedError"
        assert primary.type == wanted and primary.message
        if inc.family == "moe_runner_a2a":
            assert "requires a fused func for a2a backend" in primary.message


def test_every_acceptable_fix_passes_the_probe(incidents, store, kb_settings) -> None:
    catalog = load_catalog(store, RELEASE)
    from evals.families.replayed import A2A_CHECKPOINTS, BLOCK_CHECKPOINTS

    facts = {c.model: dict(c.facts) for c in (*BLOCK_CHECKPOINTS, *A2A_CHECKPOINTS)}
    for inc in incidents:
        fixes = inc.expected.acceptable_fixes
        assert fixes, inc.id
        argvs = [apply_edits(inc.command_argv(), catalog, set=dict(f.set)) for f in fixes]
        results = replay_startup(
            kb_settings,
            RELEASE,
            HARDWARE,
            [inc.command_argv(), *argvs],
            probe=StartupProbe(family=PROBES[inc.family]),  # type: ignore[arg-type]
            model_arch=inc.model_arch,
            model_facts=facts[inc.model],
            timeout_s=300,
            job_timeout_s=90,
        )
        assert results[0].status == "raised" and results[0].phase == "probe"
        assert [r.status for r in results[1:]] == ["passed"] * len(fixes), inc.id


def test_candidate_fixes() -> None:
    argv = ["--model-path", "m", "--tp", "8", "--ep", "2"]
    sets = [f.set for f in block_fixes(argv)]
    assert {"--ep-size": 2} not in sets and {"--tp-size": 8} not in sets
    assert {"--ep-size": 8} in sets and {"--tp-size": 4} in sets
    assert {"--tp-size": 1} not in sets  # ep 2 does not divide tp 1
    pairs = {("none", "triton"), ("deepep", "cutedsl"), ("none", "trtllm")}
    assert [f.set for f in a2a_fixes(pairs, "deepep", "trtllm")] == [
        {"--moe-runner-backend": "cutedsl"},
        {"--moe-a2a-backend": "none"},
    ]


def test_judge_says_replay_does_not_reach_a_check_no_probe_reaches(store, kb_settings) -> None:
    """A located check past argument validation that no start-up probe reaches: replay of the
    command does not get there, so the fix gets no verdict (never a trivial 'passed')."""
    check = next(
        c
        for c in store.checks(RELEASE)
        if c.path.startswith("sglang/srt/mem_cache/") and c.kind == "raise"
    )
    argv = ["--model-path", "Qwen/Qwen3-30B-A3B", "--tp-size", "2"]
    answer = {
        "status": "located",
        "release": {"release": RELEASE},
        "location": {k: getattr(check, k) for k in ("path", "function", "start_line", "end_line")},
        "parsed": {"command": argv, "hardware": HARDWARE, "model_arch": "Qwen3MoeForCausalLM"},
        "fixes": [
            {
                "recommended": True,
                "argv": [*argv, "--mem-fraction-static", "0.8"],
                "replay": {"status": "verified"},
            }
        ],
    }
    verdict = judge(answer, kb_settings)
    assert verdict["fix_replay"] is None and verdict["recommended"]
    assert "replay does not reach this check" in verdict["detail"]
