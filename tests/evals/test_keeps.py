"""``keeps_features`` as issue #28 measures it (:mod:`evals.keeps`), on 0.5.11's real
catalog: a recommended fix fails only by giving up a feature flag that some
replay-accepted fix of the incident keeps."""

from __future__ import annotations

import pytest

from evals.fix_match import flag_attr
from evals.keeps import keeps_features
from evals.scoring import catalog_for
from kb.incidents import FixSpec
from service.engine import apply_edits

ARGV = [
    "python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "8",
    "--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4",
    "--enable-lora",
]  # fmt: skip


@pytest.fixture(scope="module")
def catalog(store):
    cat = catalog_for(store, "0.5.11")
    assert cat is not None
    return cat


def _fix(catalog, *, remove=(), set_=None, recommended=False, replay_ok=False) -> dict:
    attrs = {flag_attr("--" + r, catalog) for r in remove}
    argv = apply_edits(ARGV, catalog, set=set_ or {}, remove=sorted(attrs))
    return {"argv": argv, "recommended": recommended, "replay_ok": replay_ok}


def test_giving_up_a_feature_another_accepted_fix_keeps_fails(catalog) -> None:
    rec = _fix(catalog, remove=["speculative-algorithm"], recommended=True)
    keeps = FixSpec(set={"--speculative-num-steps": 3})
    assert keeps_features(ARGV, [rec], [keeps], catalog) is False
    # the same, when the fix that keeps it is one of the answer's, verified by replay
    other = _fix(catalog, set_={"speculative_num_steps": 3}, replay_ok=True)
    assert keeps_features(ARGV, [rec, other], [], catalog) is False
    # an unverified alternative proves nothing
    other["replay_ok"] = False
    assert keeps_features(ARGV, [rec, other], [FixSpec(remove=["--speculative-algorithm"])],
                          catalog) is True  # fmt: skip


def test_giving_up_what_every_accepted_fix_gives_up_passes(catalog) -> None:
    rec = _fix(catalog, remove=["enable-lora"], recommended=True)
    assert keeps_features(ARGV, [rec], [FixSpec(remove=["--enable-lora"])], catalog) is True
    # two features that cannot run together: dropping either one is as good
    either = [FixSpec(remove=["--enable-lora"]), FixSpec(remove=["--speculative-algorithm"])]
    assert keeps_features(ARGV, [rec], either, catalog) is True
    # dropping both when dropping one is accepted is not
    both = _fix(catalog, remove=["enable-lora", "speculative-algorithm"], recommended=True)
    assert keeps_features(ARGV, [both], either, catalog) is False


def test_a_fix_that_keeps_every_feature_passes_and_no_command_is_not_scored(catalog) -> None:
    rec = _fix(catalog, set_={"speculative_num_steps": 3}, recommended=True)
    assert keeps_features(ARGV, [rec], [], catalog) is True
    assert keeps_features(None, [rec], [], catalog) is None
    lost = _fix(catalog, remove=["enable-lora"], recommended=True)
    assert keeps_features(ARGV, [lost], [], catalog) is None  # nothing accepted to compare
