"""The replay of the user's command on the release an upgrade answer names
(:mod:`service.replay.upgrade`), through the real sandboxed replay of 0.5.23."""

from __future__ import annotations

import pytest

from service.engine import UpgradeFix
from service.replay.fix_search import search_fixes
from service.replay.sandbox import status as sandbox_status
from service.replay.upgrade import verify_upgrade

from .test_search import _answer

needs_sandbox = pytest.mark.skipif(
    not sandbox_status().available, reason="replay needs the OS sandbox (bwrap)"
)


def _upgrade(release: str) -> UpgradeFix:
    return UpgradeFix(
        release=release,
        status="removed",
        sure=True,
        note="gone there",
        install=f'pip install "sglang=={release}"',
        command="c",
        citations=["0.5.11:sglang/srt/server_args.py:3519-3522"],
        not_checked=[
            f"the other checks of {release}'s start-up (a replay …)",
            "releases after 0.5.11 that the KB has not ingested",
        ],
    )


def test_without_replay_the_upgrade_stays_as_the_engine_said(kb, kb_settings) -> None:
    answer = _answer(kb, "0.5.11")
    answer.upgrade_fix = _upgrade("0.0.0")  # no wheel of it in the cache
    verify_upgrade(answer, kb_settings, deadline_s=5)
    up = answer.upgrade_fix
    assert up.replay is not None and up.replay["status"] == "unverified"
    assert "not replayed" in up.replay["detail"] and up.sure  # nothing refuted it
    plain = _answer(kb, "0.5.11")
    plain.upgrade_fix = None  # an answer without an upgrade: nothing to replay, none added
    assert verify_upgrade(plain, kb_settings, deadline_s=5).upgrade_fix is None


@needs_sandbox
def test_the_named_release_judges_the_command(kb, kb_settings) -> None:
    """0.5.23 refuses the command of one of its own crashes (on the incident's hardware):
    the upgrade is no longer sure and the summary stops leading with it. A command 0.5.23
    accepts (a fix replay verified) makes it sure and drops "the other checks"."""
    answer = _answer(kb, "0.5.23")
    hardware = answer.parsed.hardware
    assert hardware and answer.parsed.command
    answer.upgrade_fix = _upgrade("0.5.23")
    answer.summary = "AssertionError in f (0.5.23); upgrade to SGLang ≥ 0.5.23 (check removed)."
    answer.no_flag_fix = "upgrade to SGLang ≥ 0.5.23 (check removed): gone there."
    verify_upgrade(answer, kb_settings, deadline_s=600)
    up = answer.upgrade_fix
    assert up.replay is not None and up.replay["status"] == "next_failure", up.replay
    assert f"replay on 0.5.23 with {hardware}" in up.replay["detail"] and not up.sure
    assert "upgrade to SGLang" not in answer.summary
    assert "refuses the upgraded command" in (answer.no_flag_fix or "")

    fixed = _answer(kb, "0.5.23")
    fixed = search_fixes(fixed, kb_settings, deadline_s=600, force=True, max_candidates=3)
    ok = next((f for f in fixed.fixes if (f.replay or {}).get("status") == "verified"), None)
    if ok is None:
        pytest.skip("replay verified no fix of this incident")
    fixed.parsed.command = list(ok.argv)
    fixed.upgrade_fix = _upgrade("0.5.23").model_copy(update={"sure": False, "status": "may_pass"})
    fixed.summary = "AssertionError in f (0.5.23); fix: drop --x."
    verify_upgrade(fixed, kb_settings, deadline_s=600)
    up = fixed.upgrade_fix
    assert up.replay is not None and up.replay["status"] == "verified" and up.sure
    # now the answer leads with it, in the summary (before the flag fix) and the explanation
    assert fixed.summary == (
        "AssertionError in f (0.5.23); upgrade to SGLang ≥ 0.5.23 (its "
        "validation accepts your command on replay); fix: drop --x."
    )
    assert fixed.explanation.startswith("**Upgrade first:**")
    assert not any(n.startswith("the other checks") for n in up.not_checked)
    assert up.not_checked == ["releases after 0.5.11 that the KB has not ingested"]


@needs_sandbox
def test_past_the_deadline_the_upgrade_stays_unverified(kb, kb_settings) -> None:
    """No time left in the fix search's deadline: the answer goes out at once with the
    upgrade as the engine judged it, saying replay did not run."""
    answer = _answer(kb, "0.5.11")
    answer.upgrade_fix = _upgrade("0.5.16").model_copy(update={"sure": False, "status": "may_pass"})
    summary = answer.summary
    verify_upgrade(answer, kb_settings, deadline_s=0.0, use_cache=False)
    up = answer.upgrade_fix
    assert up.replay is not None and up.replay["status"] == "unverified", up.replay
    assert "did not run within the fix search's deadline" in up.replay["detail"]
    assert not up.sure and answer.summary == summary
