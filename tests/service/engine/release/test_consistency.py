"""The consistency step (``service.engine.release.consistency``) on the suite's releases.

The case: 0.5.5–0.5.11 raise the same ValueError for EAGLE top-k > 1 with paged KV, but
0.5.9 and 0.5.11 let ``fa3`` through (``attention_backend not in ["flashinfer", "fa3"]``)
where 0.5.5 does not (``!= "flashinfer"``). A frameless log of that message with
``--attention-backend fa3`` fits the three by its message, so resolution takes the newest,
0.5.11, where the check cannot fire; 0.5.5 is where it does.
"""

from __future__ import annotations

import pytest

from kb.code_types import Check
from kb.store import Store
from service.engine.logparse.parse import parse_log
from service.engine.release import consistency as cons
from service.engine.release.consistency import recheck_release
from service.engine.release.resolve import resolve_release

MSG = (
    "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results "
    "for paged attention backends. This combination is only supported for the 'flashinfer' "
    "backend."
)
SPEC = (
    "--model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE "
    "--speculative-draft-model-path m2 --speculative-eagle-topk 4 --speculative-num-steps 3 "
    "--speculative-num-draft-tokens 8 --page-size 16"
)
TRTLLM = "trtllm_mha backend only supports topk = 1 for speculative decoding."


@pytest.fixture(scope="module")
def store(kb) -> Store:
    return kb.store


def _log(flags: str, message: str = MSG) -> str:
    return f"$ python -m sglang.launch_server {flags}\nValueError: {message}\n"


def _releases_of(store: Store, message: str) -> set[str]:
    rows = store.query(
        "SELECT DISTINCT release FROM checks WHERE message LIKE ?", (f"%{message[:60]}%",)
    )
    return {r["release"] for r in rows}


def test_a_release_where_the_check_cannot_fire_is_replaced(store: Store) -> None:
    parsed = parse_log(_log(SPEC + " --attention-backend fa3"))
    res = resolve_release(parsed, store)
    assert res.range is not None and {"0.5.5", "0.5.9", "0.5.11"} <= set(res.range.releases)
    assert res.release == "0.5.11"  # the newest the message fits
    got = recheck_release(store, parsed, res, {})
    assert got.resolution.release == "0.5.5"
    assert got.located is not None and got.located.check.path == "sglang/srt/server_args.py"
    assert "cannot fire in 0.5.11" in (got.resolution.note or "")
    assert any("answered from 0.5.5, not 0.5.11" in e for e in got.resolution.evidence)
    # the check located there is the one that raises this message in 0.5.5
    assert got.located.check.id in {
        c.id
        for c in store.checks("0.5.5", path="sglang/srt/server_args.py")
        if MSG[:40] in (c.message or "")
    }


def test_the_triage_answers_from_the_release_where_it_fires(kb) -> None:
    from service.engine.triage import Engine

    out = Engine(kb).triage(_log(SPEC + " --attention-backend fa3"))
    assert out.status == "located" and out.release.release == "0.5.5"
    assert out.location is not None and out.location.citation.startswith("0.5.5:")
    assert out.evaluation is not None and out.evaluation.fired == "true"
    assert "cannot fire in 0.5.11" in (out.release.note or "")


def test_without_a_command_the_flags_are_unknown_not_the_defaults(store: Store) -> None:
    """A bare message with no command line: on the defaults (``--attn-cp-size`` 1) the check
    cannot fire in any release, but what the user set is unknown, so nothing says the
    newest release of the range is wrong and it stays, its confidence untouched."""
    text = "tp_size must be divisible by attn_cp_size"
    parsed = parse_log(f"AssertionError: {text}\n")
    res = resolve_release(parsed, store)
    newest = res.release
    assert res.range is not None and len(res.range.releases) >= 3 and newest is not None
    got = recheck_release(store, parsed, res, {})
    assert got.resolution.release == newest
    assert "cannot fire" not in (got.resolution.note or "")
    assert got.resolution.confidence == res.confidence
    assert got.located is not None and text in (got.located.check.message or "")
    # with a command that leaves the flag at its default, the same check cannot fire
    plain = parse_log(
        f"$ python -m sglang.launch_server --model-path m --tp 2\nAssertionError: {text}\n"
    )
    assert cons.fires_in(store, newest, got.located, plain.primary, plain, {}) is False
    assert cons.fires_in(store, newest, got.located, parsed.primary, parsed, {}) is not False


def test_a_check_that_fires_leaves_the_resolution_alone(store: Store) -> None:
    parsed = parse_log(_log(SPEC + " --attention-backend triton"))
    res = resolve_release(parsed, store)
    got = recheck_release(store, parsed, res, {})
    assert got.resolution is res and got.located is not None


def test_an_explicit_release_is_kept_and_doubted(store: Store) -> None:
    parsed = parse_log(_log(SPEC + " --attention-backend fa3"))
    res = resolve_release(parsed, store, explicit="0.5.11")
    got = recheck_release(store, parsed, res, {})
    assert got.resolution.release == "0.5.11"
    assert got.resolution.confidence == round(res.confidence * cons.DOUBT, 3) < res.confidence
    assert "kept 0.5.11, which was given" in (got.resolution.note or "")


def test_when_no_release_lets_it_fire_the_confidence_drops_and_the_work_is_bounded(
    store: Store,
) -> None:
    """``--attention-backend triton`` never meets the trtllm_mha check's guard: it cannot
    fire anywhere. The releases whose check reads alike are not evaluated again, and no
    more than ``MAX_TRIED`` are."""
    flags = SPEC.replace(" --page-size 16", "") + " --attention-backend triton"
    parsed = parse_log(_log(flags, TRTLLM))
    res = resolve_release(parsed, store)
    got = recheck_release(store, parsed, res, {})
    assert got.resolution.release == res.release
    assert got.resolution.confidence == round(res.confidence * cons.DOUBT, 3)
    note = got.resolution.note or ""
    assert f"cannot fire in {res.release}" in note
    others = _releases_of(store, TRTLLM) - {res.release}
    named = [r for r in others if r in note.split("cannot fire in", 1)[1]]
    assert 1 <= len(named) <= cons.MAX_TRIED
    # the newer layout (0.5.16 on) reads alike in every release: at most one of them tried
    assert sum(r in named for r in ("0.5.16", "0.5.21", "0.5.23")) <= 1


def test_signature_ignores_receivers_and_whitespace() -> None:
    a = {
        "condition": "self.ep_size in [1,\n    self.tp_size]",
        "exc_type": "AssertionError",
        "guards": [{"condition": "self.moe_runner_backend == 'x'", "polarity": True}],
    }
    b = {
        "condition": "resolved_view(server_args).ep_size in [1, tp_size]",
        "exc_type": "AssertionError",
        "guards": '[{"condition": "cfg.moe_runner_backend == \'x\'", "polarity": true}]',
    }
    sig = cons._signature
    assert sig(Check.from_row(a)) == sig(Check.from_row(b))
    c = {**a, "guards": [{"condition": "self.moe_runner_backend == 'y'", "polarity": True}]}
    assert sig(Check.from_row(a)) != sig(Check.from_row(c))


def test_a_release_the_log_names_is_kept_and_doubted(store: Store) -> None:
    parsed = parse_log("sglang==0.5.11\n" + _log(SPEC + " --attention-backend fa3"))
    res = resolve_release(parsed, store)
    assert res.release == "0.5.11"
    got = recheck_release(store, parsed, res, {})
    assert got.resolution.release == "0.5.11"
    assert "kept 0.5.11, which the log names" in (got.resolution.note or "")
