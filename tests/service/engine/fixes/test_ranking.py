"""Ranking candidate fixes (``service.engine.fixes.ranking.rank``)."""

from __future__ import annotations

import re

from service.engine.expr.interpreter import UNKNOWN
from service.engine.fixes.intent import IntentCost
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.ranking import rank


def _clean(**sets: object) -> Verdict:
    return Verdict(Edit(set=dict(sets)), fixes_check=True)


def test_a_flag_the_message_names_breaks_a_tie() -> None:
    """Two clean one-flag fixes alike in every other respect: without a word on which flag
    the user set, the order is the edits' own; the message naming one flag puts its fix
    first (``--linear-attn-prefill-backend flashinfer ...``: fixed on that flag whether or
    not ``--linear-attn-backend`` was set too)."""
    other, subject = (
        _clean(linear_attn_backend="cutedsl"),
        _clean(linear_attn_prefill_backend="cutedsl"),
    )
    assert rank([other, subject]) == [other, subject]
    assert rank([other, subject], named=frozenset({"linear_attn_prefill_backend"})) == [
        subject,
        other,
    ]


def test_a_fix_keeping_a_feature_on_comes_before_one_switching_it_off() -> None:
    """Both give up ``--speculative-algorithm NEXTN``; another algorithm the check accepts
    keeps speculative decoding, dropping the flag does not: the first leads, although
    removals otherwise come first."""
    drop = Verdict(Edit(remove=["speculative_algorithm"]), fixes_check=True)
    other = _clean(speculative_algorithm="EAGLE")
    costs = {
        drop.edit.key(): IntentCost(features=1, overridden=0, added=0, off=1),
        other.edit.key(): IntentCost(features=1, overridden=0, added=0, off=0),
    }
    assert rank([drop, other]) == [drop, other]  # without costs: removals first
    assert rank([drop, other], costs=costs) == [other, drop]
    assert rank([drop, other], costs=costs, skips_first=True) == [other, drop]


def test_a_value_the_message_spells_breaks_the_last_tie() -> None:
    """Two values of one flag alike in every other respect: the edits' own order (here
    alphabetical) unless the check's message spells one, then the message's order; a
    value only part of a longer word is not spelled."""
    dspark, eagle = _clean(speculative_algorithm="DSPARK"), _clean(speculative_algorithm="EAGLE")
    assert rank([eagle, dspark]) == [dspark, eagle]
    message = "Only EAGLE and DSPARK speculative algorithms are supported"
    assert rank([dspark, eagle], message=message) == [eagle, dspark]
    assert rank([dspark, eagle], message="Only EAGLE3 is supported") == [dspark, eagle]
    assert rank([eagle, dspark], message="use DSPARK or EAGLE") == [dspark, eagle]


def test_a_value_listed_earlier_among_the_choices_breaks_a_tie() -> None:
    """Two backends alike in every other respect: the release's listed order of the flag's
    choices puts one first (not the alphabet); a value not listed, or a number, comes
    after; the message spelling one still decides first."""
    npu, ep = _clean(moe_a2a_backend="ascend_fuseep"), _clean(moe_a2a_backend="deepep")
    listed = {"moe_a2a_backend": ["none", "deepep", "mooncake", "ascend_fuseep"]}
    assert rank([ep, npu]) == [npu, ep]  # without the choices: by key
    assert rank([npu, ep], choices=listed) == [ep, npu]
    other = _clean(moe_a2a_backend="custom")
    assert rank([other, npu], choices=listed) == [npu, other]
    assert rank([ep, npu], choices=listed, message="use ascend_fuseep") == [npu, ep]


def test_the_named_flag_does_not_outrank_a_clean_fix() -> None:
    """A fix that trips another check stays behind a clean one, named flag or not."""
    clean = _clean(tp_size=2)
    tripping = Verdict(
        Edit(set={"attn_cp_size": 1}), fixes_check=True, trips=[{"id": "x", "line": 1}]
    )
    assert rank([tripping, clean], named=frozenset({"attn_cp_size"})) == [clean, tripping]


def test_without_the_command_a_fix_that_holds_whatever_else_was_set_comes_first() -> None:
    """``robust``: the fixes that pass the check with every unseen flag unknown. They lead
    within their status, before a fix that keeps more but holds only on the defaults."""
    keeps = _clean(disable_overlap_schedule=True)
    holds = Verdict(Edit(remove=["pp_size"]), fixes_check=True)
    assert rank([keeps, holds]) == [holds, keeps]  # removals first, all else equal
    assert rank([holds, keeps], robust=frozenset({keeps.edit.key()})) == [keeps, holds]
    assert rank([keeps, holds], robust=frozenset({holds.edit.key()})) == [holds, keeps]


def test_a_frameless_disjunction_is_fixed_on_what_every_branch_needs(kb) -> None:
    """A message listing three features incompatible with pipeline parallelism, posted
    alone: turning one feature off holds only if the user set no other, so the fix
    recommended is on the pipeline size, which the check needs whatever else was set."""
    from service.engine import Engine

    message = "Pipeline parallelism is not compatible with overlap schedule"
    found = [
        c
        for c in kb.store.checks("0.5.9", path="sglang/srt/server_args.py")
        if message in (c.message or "")
    ]
    assert found, "0.5.9 raises it"
    text = found[0].message.strip("\"'").split('"')[0]
    out = Engine(kb).triage({"log": f"AssertionError: {text}\n"}, release="0.5.9")
    top = next(f for f in out.fixes if f.recommended)
    assert set(top.set) | set(top.remove) <= {"--pp-size", "--pipeline-parallel-size"}, top


def test_without_the_command_dropping_a_flag_sglang_sets_itself_is_not_sure(kb) -> None:
    """Two flags a message calls mutually exclusive, posted alone: an earlier step of the
    release sets one of them itself (for a decode server, among others), so dropping it from
    a command that may never have had it is no sure fix; dropping the other one is."""
    from service.engine import Engine
    from service.engine.evaluate.chain import earlier_writes

    store = kb.store
    check = next(
        c
        for c in store.checks("0.5.23", path="sglang/srt/arg_groups/kv_cache_hook.py")
        if "enable-hierarchical-cache and disable-radix-cache are mutually exclusive"
        in (c.message or "")
    )
    writes = earlier_writes(store, "0.5.23", "disable_radix_cache", check)
    assert any(w.value == "True" for w in writes)  # SGLang's own
    assert not earlier_writes(store, "0.5.23", "enable_hierarchical_cache", check)
    text = "".join(re.findall(r'"([^"]*)"', check.message or ""))  # the source's literals
    out = Engine(kb).triage({"log": f"ValueError: {text}\n"}, release="0.5.23")
    top = next(f for f in out.fixes if f.recommended)
    assert top.remove == ["--enable-hierarchical-cache"] and not top.set, top


def test_without_the_command_fewer_undecided_neighbours_come_first() -> None:
    """On a launch only assumed, a related check left undecided may well fire: among fixes
    that hold whatever the unseen flags were, the one deciding more leads, even over one
    keeping more of the request. With the command (``robust`` None) replay decides, and
    the neighbours stay a late tie-break."""
    test = Verdict(Edit(remove=["pp_size"]), fixes_check=True, unknown_neighbours=1)
    guard = Verdict(Edit(remove=["moe_dp_size"]), fixes_check=True)
    costs = {
        test.edit.key(): IntentCost(features=0, overridden=1, added=0, off=0),
        guard.edit.key(): IntentCost(features=1, overridden=1, added=0, off=1),
    }
    both = frozenset({test.edit.key(), guard.edit.key()})
    assert rank([guard, test], costs=costs) == [test, guard]
    assert rank([test, guard], costs=costs, robust=both) == [guard, test]
    assert rank([test, guard], robust=frozenset({test.edit.key()})) == [test, guard]


def test_a_write_that_cannot_run_on_this_gpu_does_not_make_a_drop_unsure(kb) -> None:
    """0.5.23 enables Aiter all-reduce fusion itself only on an AMD GPU: posted alone, the
    context-parallelism assert on it is fixed on an NVIDIA GPU by dropping
    ``--enable-aiter-allreduce-fusion`` (what the message names); the write is judged
    against the machine's facts, so on an AMD GPU it may have run."""
    from service.engine import Engine
    from service.engine.evaluate.chain import earlier_writes
    from service.engine.evaluate.fold import write_fails
    from service.engine.rules.card_env import facts_for

    store = kb.store
    message = "Aiter allreduce fusion is not supported with context parallelism"
    check = next(
        c
        for c in store.checks("0.5.23", path="sglang/srt/arg_groups/parallel_hook.py")
        if message in (c.message or "")
    )
    (write,) = [
        w
        for w in earlier_writes(store, "0.5.23", "enable_aiter_allreduce_fusion", check)
        if w.value == "True"
    ]
    assert write_fails(store, "0.5.23", check, write, {}, facts_for("h200-x8", None))
    assert not write_fails(store, "0.5.23", check, write, {}, facts_for("mi300x-x8", None))
    out = Engine(kb).triage(
        {"log": f"AssertionError: {message}\n"}, release="0.5.23", hardware="h200-x8"
    )
    top = next(f for f in out.fixes if f.recommended)
    assert top.remove == ["--enable-aiter-allreduce-fusion"] and not top.set, top


def test_a_number_nearer_the_launchs_own_breaks_the_last_tie() -> None:
    """Two pipeline sizes alike in every other respect (``tp_size * pp_size`` divisible by
    ``--nnodes 8`` with ``--tp-size 4``): 2 is the smaller change from 1, whatever the
    edits' keys say (``'16' < '2'`` as text). Without the launch's value (a log posted
    alone) nearness says nothing: the keys decide."""
    two, sixteen = _clean(pp_size=2), _clean(pp_size=16)
    assert rank([two, sixteen]) == [sixteen, two]  # the keys alone
    assert rank([sixteen, two], current={"pp_size": 1}) == [two, sixteen]
    assert rank([two, sixteen], current={"pp_size": UNKNOWN}) == [sixteen, two]
    assert rank([two, sixteen], current={"pp_size": 32}) == [sixteen, two]
