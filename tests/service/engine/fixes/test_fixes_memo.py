"""Fix search and path evaluation through their memo tables give the uncached answers."""

from __future__ import annotations

import pytest

from kb.catalogs import load_catalog
from service.engine.cache import LRUCache, clear_all
from service.engine.evaluate import fold, write_effects
from service.engine.evaluate import path_condition as evaluation
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.path_condition import base_attrs, evaluate_path, prepared_pieces
from service.engine.expr.interpreter import Env, Provenance, Value, evaluate
from service.engine.fixes import edits as fix_edits
from service.engine.fixes import neighbours
from service.engine.fixes import propose as fixes
from service.engine.flags.parse import parse_argv
from service.engine.rules.checker import facts_for
from tests.service.engine.counting import calls_of

RELEASE = "0.5.11"
ARGV = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/d",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]


@pytest.fixture(scope="module")
def seed(kb):  # the session KnowledgeBase fixture
    store = kb.store
    check = next(
        c
        for c in store.checks(RELEASE, function="ServerArgs._handle_speculative_decoding")
        if c.bare and "speculative_eagle_topk is None" in c.condition
    )
    catalog = load_catalog(store, RELEASE)
    parsed = parse_argv(ARGV, catalog)
    attrs = base_attrs(catalog, parsed)
    facts = facts_for("rtx-pro-6000-x8", None, "/models/Kimi-K2.6")
    return store, check, catalog, parsed, attrs, facts


def _old_neighbours(store, check, attrs) -> list[str]:
    """The original query: one SQL LIKE scan per call."""
    likes = " OR ".join(["condition LIKE ?"] * len(attrs) + ["guards LIKE ?"] * len(attrs))
    params = [f"%{a}%" for a in attrs] * 2
    rows = store.checks(
        RELEASE,
        where=f"(path = ? OR path LIKE ?) AND ({likes})",
        params=[check.path, "sglang/srt/arg_groups/%", *params],
    )
    return [r.id for r in rows if r.id != check.id][: neighbours.MAX_NEIGHBOURS]


@pytest.mark.parametrize(
    "attrs",
    [
        {"speculative_eagle_topk"},
        {"page_size", "tp_size"},
        {"speculative_num_draft_tokens", "speculative_algorithm"},
        {"ATTENTION_backend"},
    ],
)
def test_neighbours_match_the_sql_like_query(seed, attrs: set[str]) -> None:
    store, check = seed[0], seed[1]
    clear_all()
    assert [r.id for r in neighbours.neighbours(store, RELEASE, check, attrs)] == _old_neighbours(
        store, check, attrs
    )
    # and again from the cache
    assert [r.id for r in neighbours.neighbours(store, RELEASE, check, attrs)] == _old_neighbours(
        store, check, attrs
    )


def test_like_pattern_follows_sqlite() -> None:
    pat = neighbours._like_pattern("tp_size")
    assert pat.search("self.TP_SIZE > 1") and pat.search("self.tp-size") and pat.search("tp\nsize")
    assert not pat.search("tpsize") and not pat.search("tp__size")


def _uncached(store, check, attrs, facts):
    """evaluate_path without any memo: the fold and every piece evaluated afresh."""
    texts, names = prepared_pieces(store, RELEASE, check, frozenset(facts))
    attrs = dict(attrs)
    _, caveats, notes = fold._fold(store, RELEASE, check, attrs, facts, frozenset(names), None)
    env = Env(attrs, facts)
    return [evaluate(cond, env) for _, cond, _, _ in texts], caveats, notes


def test_memoised_path_evaluation_equals_the_uncached_one(seed) -> None:
    store, check, catalog, parsed, attrs, facts = seed
    clear_all()
    ev = evaluate_path(store, RELEASE, check, attrs, facts)
    edits = fix_edits.candidate_edits(store, RELEASE, check, ev, parsed, catalog, attrs, facts)
    assert len(edits) > 5
    for _ in range(2):  # cold, then from the memo tables
        for edit in edits:
            new = fix_edits.edited_attrs(attrs, edit, catalog)
            got = evaluate_path(store, RELEASE, check, new, facts)
            results, caveats, notes = _uncached(store, check, new, facts)
            assert [p.result for p in got.parts] == results
            assert got.caveats == caveats and got.write_notes == notes


def test_fold_replay_leaves_the_same_environment(seed) -> None:
    store, check, _, _, attrs, facts = seed
    _, names = prepared_pieces(store, RELEASE, check, frozenset(facts))
    fresh = dict(attrs)
    fold._fold(store, RELEASE, check, fresh, facts, frozenset(names), None)
    for _ in range(2):
        replayed = dict(attrs)
        fold.apply_earlier_writes(store, RELEASE, check, replayed, facts, set(names))
        assert list(replayed.items()) == list(fresh.items())


def test_a_fold_memoised_under_other_facts_is_reused_only_when_they_answer_alike(seed) -> None:
    """The fold table keys on the facts the fold read: under each machine, the memoised fold
    (warm from the machines before) equals the uncached fold, and a GPU of the same
    generation with other memory does not force a new fold when no guard read the memory."""
    store, check, _, _, attrs, _ = seed
    _, names = prepared_pieces(store, RELEASE, check, frozenset(facts_for("h100-x8")))
    clear_all()
    for hw in ("h100-x8", "h200-x8", "b200-x8", "mi300x-x8", "h100-x8"):
        facts = facts_for(hw, None, "/models/Kimi-K2.6")
        got = fold.fold_earlier_writes(store, RELEASE, check, attrs, facts, names)
        fresh = fold._fold(store, RELEASE, check, dict(attrs), facts, frozenset(names), None)
        assert got == fresh, hw
    assert fold._FOLDS.hits >= 1  # the second H100 at least was served from the table


def _answer(verdicts) -> list[tuple]:
    return [
        (v.edit.key(), v.edit.origin, v.fixes_check, v.trips, v.unknown_neighbours)
        for v in verdicts
    ]


def test_propose_with_warm_caches_equals_propose_without(seed, monkeypatch) -> None:
    store, check, catalog, parsed, attrs, facts = seed
    clear_all()
    ev = evaluate_path(store, RELEASE, check, attrs, facts)
    ctx = CheckContext(store, RELEASE, catalog, check, [], parsed, attrs, facts)
    warm = [fixes.propose(ctx, ev) for _ in range(2)]
    # caches of one entry: nothing is reused between calls
    for module, name in [
        (neighbours, "_FIRED"),
        (neighbours, "_ATTR_ROWS"),
        (neighbours, "_RECHECKS"),
        (neighbours, "_PLANS"),
        (fold, "_FOLDS"),
        (evaluation, "_PIECES"),
    ]:
        monkeypatch.setattr(module, name, LRUCache(f"test.{name}", 1))
    cold = fixes.propose(ctx, ev)
    assert _answer(warm[0]) == _answer(warm[1]) == _answer(cold)
    assert cold and cold[0].fixes_check is True


def _base_attrs_reference(catalog, parsed, log=None) -> dict:
    """base_attrs as it was before its defaults were cached."""
    attrs: dict = {}
    for spec in catalog.flags:
        if spec.default_known and spec.attr not in attrs:
            attrs[spec.attr] = Value(
                spec.default,
                Provenance("default", f"default {spec.default!r} ({spec.path}:{spec.line})"),
            )
    for decl in catalog.declarations:
        if decl.default_known:
            attrs[decl.attr] = Value(
                decl.default,
                Provenance("default", f"default {decl.default!r} ({decl.path}:{decl.line})"),
            )
    for key, value in (log or {}).items():
        attrs[key] = Value(value, Provenance("derived", "value in the logged server_args line"))
    for attr, pf in parsed.values.items():
        attrs[attr] = Value(pf.value, Provenance("flag", " ".join(pf.raw)))
    return attrs


def test_base_attrs_equals_a_full_build_and_is_a_fresh_dict(seed) -> None:
    _, _, catalog, parsed, _, _ = seed
    for log in (None, {"page_size": 64, "not_a_flag": 1}):
        got = base_attrs(catalog, parsed, log)
        assert list(got.items()) == list(_base_attrs_reference(catalog, parsed, log).items())
    got["tp_size"] = Value(3, Provenance("flag", "mutated"))
    assert base_attrs(catalog, parsed)["tp_size"].provenance.detail != "mutated"


MACHINES = ("h100-x8", "mi300x-x8", "b200-x8", "h200-x8")


def _candidates(seed) -> tuple[list, list[dict]]:
    """The fix candidates of the seed's check (found on the first machine) and the
    attributes after each."""
    store, check, catalog, parsed, attrs, _ = seed
    ev = evaluate_path(store, RELEASE, check, attrs, facts_for(MACHINES[0]))
    edits = fix_edits.candidate_edits(store, RELEASE, check, ev, parsed, catalog, attrs, {})
    return edits, [fix_edits.edited_attrs(attrs, e, catalog) for e in edits]


def test_pieces_that_asked_no_fact_serve_every_machine(seed, monkeypatch) -> None:
    """A piece whose evaluation asked the facts nothing is kept for any facts: under each
    new machine only the pieces that asked are evaluated again, and every result equals
    the uncached one."""
    store, check = seed[0], seed[1]
    _, envs = _candidates(seed)
    calls = calls_of(monkeypatch, evaluation, "evaluate")
    clear_all()
    counts = []
    for hw in MACHINES:
        facts = facts_for(hw, None, "/models/Kimi-K2.6")
        calls[0] = 0
        for new in envs:
            got = evaluate_path(store, RELEASE, check, new, facts)
            assert [p.result for p in got.parts] == _uncached(store, check, new, facts)[0]
        counts.append(calls[0])
    assert max(counts[1:]) < counts[0]


def test_a_fold_for_a_candidate_evaluates_only_the_writes_its_change_reaches(
    seed, monkeypatch
) -> None:
    """Each candidate's fold of the earlier writes repeats the writes of the last fold that
    no changed value reaches: every fold equals the uncached one, with fewer writes
    evaluated than folding each afresh."""
    store, check, catalog, parsed, attrs, facts = seed
    _, names = prepared_pieces(store, RELEASE, check, frozenset(facts))
    ev = evaluate_path(store, RELEASE, check, attrs, facts)
    edits = fix_edits.candidate_edits(store, RELEASE, check, ev, parsed, catalog, attrs, facts)
    envs = [fix_edits.edited_attrs(attrs, e, catalog) for e in edits]
    writes = calls_of(monkeypatch, write_effects, "_effect_of")
    clear_all()
    fold.fold_earlier_writes(store, RELEASE, check, attrs, facts, names)
    writes[0] = 0
    warm = [fold.fold_earlier_writes(store, RELEASE, check, new, facts, names) for new in envs]
    incremental, writes[0] = writes[0], 0
    cold = [fold._fold(store, RELEASE, check, dict(new), facts, names, None) for new in envs]
    assert warm == cold
    assert 0 < incremental < writes[0]


def test_a_neighbour_verdict_serves_machines_that_answer_its_questions_alike(
    seed, monkeypatch
) -> None:
    """A neighbour's verdict without earlier writes is kept by the facts it asked (by
    value): machines answering those alike reuse it, and each machine's re-check equals a
    cold one."""
    store, check, catalog, _, attrs, _ = seed
    edits, _ = _candidates(seed)

    def recheck(facts) -> list[tuple]:
        out = []
        for edit in edits:
            verdict = fixes.Verdict(edit, True)
            neighbours.recheck_neighbours(store, RELEASE, check, verdict, attrs, facts, catalog)
            out.append((verdict.trips, verdict.unknown_neighbours))
        return out

    calls = calls_of(monkeypatch, neighbours, "path_fires")
    clear_all()
    machines = [facts_for(hw, None, "/models/Kimi-K2.6") for hw in MACHINES]
    warm, counts = [], []
    for facts in machines:
        calls[0] = 0
        warm.append(recheck(facts))
        counts.append(calls[0])
    cold = []
    for facts in machines:
        clear_all()
        calls[0] = 0
        cold.append(recheck(facts))
    assert warm == cold
    assert sum(counts[1:]) < calls[0] * (len(machines) - 1) and min(counts[1:]) < counts[0]


def test_whether_a_check_fires_is_kept_by_the_facts_its_pieces_asked(seed, monkeypatch) -> None:
    """path_fires gives evaluate_path's verdict without earlier writes, with the facts its
    pieces asked by value: under machines answering those alike the truths are reused."""
    store, check = seed[0], seed[1]
    _, envs = _candidates(seed)
    rows = [check, *neighbours.neighbours(store, RELEASE, check, {"speculative_eagle_topk"})]
    calls = calls_of(monkeypatch, evaluation, "evaluate")
    clear_all()
    counts = []
    for hw in MACHINES:
        facts = facts_for(hw, None, "/models/Kimi-K2.6")
        names, sigs = frozenset(facts), {}
        calls[0] = 0
        for row in rows[:20]:
            for new in envs:
                fired, asked = evaluation.path_fires(store, RELEASE, row, new, facts, names, sigs)
                expected = evaluate_path(store, RELEASE, row, new, facts, apply_writes=False)
                assert fired is expected.fired, (hw, row.id)
                assert all(k[0] != "=+" for k, _ in asked)  # by value
        counts.append(calls[0])
    assert min(counts[1:]) < counts[0]
