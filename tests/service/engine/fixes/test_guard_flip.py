"""Another check's guard (issue #28, item 5): a candidate that only flips an early exit the
path passes skips the located check instead of fixing it. It ranks after fixes of the check
that keep as much, its text says what it turns off, and the replay search keeps it only if
SGLang accepts it (tests/service/replay/test_search_keeps.py)."""

from __future__ import annotations

from kb.catalogs import load_catalog
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.evaluate.pieces import PiecePart
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Value, evaluate
from service.engine.fixes.filters import guard_flip, turns_off
from service.engine.fixes.intent import intent_cost
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.present import fix_out
from service.engine.fixes.ranking import rank
from service.engine.flags.parse import parse_argv

RELEASE = "0.5.11"
ATTRS = {"enable_dp_attention": True, "dp_size": 3, "tp_size": 8}


def _part(condition: str, kind: str, polarity: bool, own: bool = False) -> PiecePart:
    env = Env({k: Value(v, Provenance("flag", k)) for k, v in ATTRS.items()}, {})
    res = evaluate(condition, env)
    holds = res.truth if polarity else (not res.truth if res.truth is not UNKNOWN else UNKNOWN)
    return PiecePart(
        role="test" if own else "guard",
        condition=condition,
        polarity=polarity,
        line=1,
        result=res,
        holds=holds,
        kind=kind,
        own_test=own,
    )


def _ev() -> PathEvaluation:
    """``if not self.enable_dp_attention: return`` then ``assert tp % dp == 0``."""
    return PathEvaluation(
        fired=True,
        attrs=set(ATTRS),
        parts=[
            _part("not self.enable_dp_attention", "exit_return", polarity=False),
            _part("self.tp_size % self.dp_size == 0", "test", polarity=False, own=True),
        ],
    )


def test_flipping_only_the_early_exit_is_a_guard_flip() -> None:
    ev = _ev()
    flip = guard_flip(Edit(remove=["enable_dp_attention"]), ev)
    assert flip is not None and flip.kind == "exit_return"
    # an edit of what the check itself reads fixes the check, even with the exit touched too
    assert guard_flip(Edit(set={"dp_size": 2}), ev) is None
    assert guard_flip(Edit(remove=["enable_dp_attention", "dp_size"]), ev) is None
    assert guard_flip(Edit(), ev) is None


def test_a_guard_flip_says_what_it_turns_off_and_ranks_after_a_fix(kb) -> None:
    """Presented as the user typed it: origin and verdict say it skips the check and what it
    turns off (the replay search keeps it only if SGLang accepts it); ranked
    after a fix of what the check tests that gives up no more feature flags."""
    catalog = load_catalog(kb.store, RELEASE)
    argv = ["--model-path", "m", "--tp", "8", "--dp", "3", "--enable-dp-attention"]
    parsed = parse_argv(argv, catalog)
    ev = _ev()
    edit = Edit(remove=["enable_dp_attention"], origin="drop flags the check reads")
    flip = guard_flip(edit, ev)
    assert flip is not None
    edit.skips = turns_off(edit, flip, parsed, catalog)
    assert edit.skips.startswith("turns off --enable-dp-attention")
    assert "`not self.enable_dp_attention`" in edit.skips
    out = fix_out(1, Verdict(edit, True), argv, catalog, parsed, RELEASE, prefix="")
    assert out.origin.endswith("(skips the check)") and out.fixes_check == "true"
    assert out.verdict.startswith(
        "skips the check rather than fixing it (turns off --enable-dp-attention: an early exit"
    )
    assert "replay accepts it" in out.verdict
    assert out.gives_up == "gives up --enable-dp-attention" and not out.keeps_features
    assert "--enable-dp-attention" not in out.argv
    # a setting's early exit: what it turns off is said, gives_up is about feature flags
    toggle = Edit(set={"dp_size": 1}, origin="a value the check accepts", skips="turns off x")
    shown = fix_out(2, Verdict(toggle, True), argv, catalog, parsed, RELEASE, prefix="")
    assert shown.keeps_features and shown.gives_up == "" and "(turns off x)" in shown.verdict
    costs = {e.key(): intent_cost(e.set, e.remove, parsed, catalog) for e in (edit, toggle)}
    fixed = Edit(set={"dp_size": 2}, origin="a value the check accepts")
    costs[fixed.key()] = intent_cost(fixed.set, fixed.remove, parsed, catalog)
    ranked = rank([Verdict(toggle, True), Verdict(edit, True), Verdict(fixed, True)], ev, costs)
    assert [v.edit for v in ranked] == [fixed, toggle, edit]


def test_a_flag_the_message_names_is_the_checks_subject_not_a_detour(kb) -> None:
    """``--prefill-only-disable-kv-cache does not currently support --kv-cache-dtype=mxfp8``
    after ``if not self.prefill_only_disable_kv_cache: return``: the message names the flag
    the early exit reads, so turning it off answers the message; it is no guard flip. A
    flag the message does not name stays one (:func:`message_attrs`, the KB's own check)."""
    from service.engine.fixes.filters import message_attrs

    check = next(
        c
        for c in kb.store.checks(
            "0.5.16", function="ServerArgs._validate_prefill_only_disable_kv_cache_args"
        )
        if "mxfp8" in (c.message or "")
    )
    named = message_attrs(check, load_catalog(kb.store, "0.5.16"))
    assert named == {"prefill_only_disable_kv_cache", "kv_cache_dtype"}
    env = Env({}, {})
    exits = [
        PiecePart(
            role="guard",
            condition=g["condition"],
            polarity=bool(g["polarity"]),
            line=int(g["line"]),
            result=evaluate(g["condition"], env),
            holds=True,
            kind="exit_return",
        )
        for g in check.guards
        if g["kind"] == "early_exit"
    ]
    ev = PathEvaluation(fired=True, attrs=set(), parts=exits)
    drop = Edit(remove=["prefill_only_disable_kv_cache"])
    assert guard_flip(drop, ev) is not None  # read by an early exit only
    assert guard_flip(drop, ev, named) is None  # but the message is about it
    assert guard_flip(Edit(remove=["is_embedding"]), ev, named) is not None


def test_a_pair_drop_stays_beside_a_drop_that_passes_at_an_early_exit(kb) -> None:
    """Dropping ``--prefill-only-disable-kv-cache`` answers its message but passes the check
    at the function's early exit; replay may refute it (on 0.5.16 the launch then fails at
    another check). Where the command sets ``--kv-cache-dtype``, the pair that also drops it
    stays listed after it, for the replay search to fall back to. Each shipped incident of
    that check, with its command; the expectation is the incident's own (an acceptable fix
    is listed)."""
    from evals.incidents import load_incidents
    from service.engine import Engine

    engine = Engine(kb)
    cases = [
        inc
        for inc in load_incidents()
        if inc.expected.location is not None
        and inc.expected.location.function.endswith("validate_prefill_only_disable_kv_cache_args")
        and inc.expected.release is not None
        and kb.store.release(inc.expected.release) is not None
    ]
    assert cases, "no shipped incident of the prefill-only check"
    for inc in cases:
        result = engine.triage({"log": inc.crash_log}, release=inc.expected.release)
        drops = [sorted(f.remove) for f in result.fixes if not f.set]
        assert ["--prefill-only-disable-kv-cache"] in drops, (inc.id, drops)
        if "--kv-cache-dtype" in (inc.command or []):
            pair = ["--kv-cache-dtype", "--prefill-only-disable-kv-cache"]
            assert pair in drops, (inc.id, drops)
