"""Intent-preserving fixes, on the shipped generated incidents (issue #20, part 4).

Every case comes from an incident file (or an incident re-spelled the way argparse
accepts it), never from a hand-written answer: the properties are what is checked.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from evals.incidents import Incident, load_incidents
from kb.catalogs import load_catalog
from kb.code_types import Check
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.path_condition import base_attrs, evaluate_path
from service.engine.expr.interpreter import UNKNOWN, Provenance, Value
from service.engine.fixes.edits import _choice_sites
from service.engine.fixes.intent import intent_cost, is_count, is_feature, losses
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.present import fix_out
from service.engine.fixes.propose import propose
from service.engine.flags.parse import parse_argv
from service.engine.logparse.parse import parse_log
from service.engine.triage import Engine
from tests.conftest import TEST_RELEASES

#: generated incidents of these releases are triaged once for the whole module
RELEASES = ("0.5.9", "0.5.11")


def _incidents(kb) -> list[Incident]:
    rels = {r["version"] for r in kb.store.releases()}
    return [
        i
        for i in load_incidents()
        if i.release in RELEASES
        and i.release in rels
        and i.release in TEST_RELEASES
        and i.command
        and i.id.startswith(("gen-", "seed-"))
    ]


def _triage(engine: Engine, inc: Incident, log: str | None = None):
    return engine.triage(
        log or inc.crash_log,
        release=inc.release,
        hardware=inc.hardware,
        model=inc.model,
        model_arch=inc.model_arch,
    )


@pytest.fixture(scope="module")
def answers(kb) -> list[tuple[Incident, Any]]:
    engine = Engine(kb)
    return [(inc, _triage(engine, inc)) for inc in _incidents(kb)]


def _check_of(store, inc: Incident, release: str | None = None) -> Check | None:
    """The check the incident expects, in ``release`` (its own by default)."""
    loc = inc.expected.location
    if loc is None or loc.start_line is None:
        return None
    return next(
        (
            c
            for c in store.checks(release or inc.release, path=loc.path)
            if c.start_line == loc.start_line
        ),
        None,
    )


def test_answers_were_built(answers) -> None:
    assert len(answers) >= 30
    assert all(r.status == "located" for _, r in answers)


def test_a_partial_companion_set_is_completed_keeping_the_users_values(kb, answers) -> None:
    """Incidents whose check is followed by SGLang assigning a group of flags itself, of
    which the user set some and not others: the best fix adds the missing ones and keeps
    every value the user set."""
    cases = 0
    for inc, result in answers:
        check = _check_of(kb.store, inc)
        if check is None:
            continue
        catalog = load_catalog(kb.store, inc.release)
        parsed = parse_argv(inc.command_argv(), catalog)
        partial = [
            names
            for names, _ in _choice_sites(kb.store, inc.release, check)
            if any(n in parsed.values for n in names) and any(n not in parsed.values for n in names)
        ]
        if not partial:
            continue
        cases += 1
        top = result.fixes[0]
        assert top.recommended and top.fixes_check == "true" and not top.trips, inc.id
        assert top.keeps_features and not top.gives_up, inc.id
        assert top.edits and all(line.startswith("+ ") for line in top.edits), (inc.id, top.edits)
        fixed = parse_argv(top.argv, catalog)
        for attr, pf in parsed.values.items():  # every value of the user's is still there
            assert attr in fixed.values and fixed.values[attr].value == pf.value, (inc.id, attr)
        group = {n for names in partial for n in names}
        added = {a for a in fixed.values if a not in parsed.values}
        assert added and added <= group, (inc.id, added)
    assert cases >= 3  # the seed's two attempts and the generated EAGLE ones


def test_keeping_a_feature_ranks_before_giving_it_up(answers) -> None:
    """Among verified clean fixes that violate no error card, the best one that keeps the
    user's feature flags comes before every one that gives one up (further value variants
    of one edit may follow: the list shows other kinds of fix first); so the recommended
    fix keeps them whenever such a fix exists."""
    cases = 0
    for inc, result in answers:
        clean = [
            f
            for f in result.fixes
            if f.fixes_check == "true"
            and not f.trips
            and not any(v.verdict == "violated" and v.severity == "error" for v in f.rule_verdicts)
        ]
        keeps = [f.rank for f in clean if f.keeps_features]
        drops = [f.rank for f in clean if not f.keeps_features]
        if keeps and drops:
            cases += 1
            assert min(keeps) < min(drops), (inc.id, keeps, drops)
        recommended = next((f for f in result.fixes if f.recommended), None)
        if keeps and recommended is not None:
            assert recommended.keeps_features, inc.id
    assert cases >= 5


def _attr_of(key: str, catalog, parsed) -> str | None:
    """The attribute a fix's ``set``/``remove`` key names (a catalog or the user's spelling)."""
    spec = catalog.by_flag().get(key)
    if spec is not None:
        return spec.attr
    return next((a for a, pf in parsed.values.items() if pf.token == key), None)


def test_no_fix_sets_a_count_to_zero_or_less_when_it_was_positive(answers, kb) -> None:
    checked = 0
    for inc, result in answers:
        catalog = load_catalog(kb.store, inc.release)
        by_attr = catalog.by_attr()
        parsed = parse_argv(inc.command_argv(), catalog)
        for fix in result.fixes:
            for key, value in fix.set.items():
                attr = _attr_of(key, catalog, parsed)
                spec = by_attr.get(attr or "")
                if spec is None or not is_count(spec) or isinstance(value, bool):
                    continue
                before = (
                    parsed.values[attr].value
                    if attr in parsed.values
                    else (spec.default if spec.default_known else None)
                )
                if isinstance(before, int) and before > 0:
                    checked += 1
                    assert isinstance(value, int) and value > 0, (inc.id, key, value)
    assert checked >= 5


def test_edits_gives_up_and_keeps_features_are_filled(answers, kb) -> None:
    gave_up = 0
    for inc, result in answers:
        catalog = load_catalog(kb.store, inc.release)
        parsed = parse_argv(inc.command_argv(), catalog)
        user_words = shlex.join(inc.command_argv())
        for fix in result.fixes:
            assert fix.edits, (inc.id, fix.rank)
            assert all(line[:2] in ("+ ", "- ") for line in fix.edits), fix.edits
            for line in fix.edits:  # a "-" line is what the user typed, a "+" line is in the fix
                words = user_words if line.startswith("- ") else shlex.join(fix.argv)
                assert line[2:] in words, (inc.id, line)
            assert fix.keeps_features == (fix.gives_up == ""), (inc.id, fix.rank)
            set_ = {_attr_of(k, catalog, parsed): v for k, v in fix.set.items()}
            remove = [_attr_of(k, catalog, parsed) for k in fix.remove]
            lost = losses(
                {k: v for k, v in set_.items() if k}, [r for r in remove if r], parsed, catalog
            )
            assert bool(lost) == (not fix.keeps_features), (inc.id, fix.rank)
            for x in lost:  # named as the user typed it, and said in the verdict too
                assert " ".join(parsed.values[x.attr].raw) in fix.gives_up, fix.gives_up
            if fix.gives_up:
                gave_up += 1
                assert fix.gives_up.startswith("gives up ") and fix.gives_up in fix.verdict
    assert gave_up >= 5


def test_feature_flags_are_read_from_the_catalog(kb) -> None:
    by_attr = load_catalog(kb.store, "0.5.11").by_attr()
    assert is_feature(by_attr["speculative_algorithm"], "EAGLE3")
    assert is_feature(by_attr["disaggregation_mode"], "decode")
    assert not is_feature(by_attr["disaggregation_mode"], "null")  # asking for the default
    assert is_feature(by_attr["enable_lora"], True) and is_feature(by_attr["model_path"], "m")
    assert is_feature(by_attr["quantization"], "fp8")
    for setting, value in [
        ("attention_backend", "fa3"),
        ("page_size", 64),
        ("tp_size", 8),
        ("speculative_eagle_topk", 4),
        ("disable_radix_cache", True),
    ]:
        assert not is_feature(by_attr[setting], value), setting
    assert is_count(by_attr["tp_size"]) and is_count(by_attr["speculative_eagle_topk"])
    assert not is_count(by_attr["attention_backend"])


def test_a_feature_given_another_value_is_not_switched_off(kb) -> None:
    """A selector given another value that still asks for a feature keeps the feature on
    (given up, not switched off); dropping it, or a switch, or an "off" choice, switches
    it off. Read from 0.5.11's catalog."""
    catalog = load_catalog(kb.store, "0.5.11")
    argv = ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--enable-lora"]
    argv += ["--moe-a2a-backend", "deepep"]
    parsed = parse_argv(argv, catalog)
    variant = intent_cost({"speculative_algorithm": "EAGLE"}, [], parsed, catalog)
    dropped = intent_cost({}, ["speculative_algorithm"], parsed, catalog)
    assert (variant.features, variant.off) == (1, 0)
    assert (dropped.features, dropped.off) == (1, 1)
    assert intent_cost({}, ["enable_lora"], parsed, catalog).off == 1
    assert intent_cost({"moe_a2a_backend": "none"}, [], parsed, catalog).off == 1
    other = next(
        c for c in catalog.by_attr()["moe_a2a_backend"].choices or [] if c not in ("none", "deepep")
    )
    assert intent_cost({"moe_a2a_backend": other}, [], parsed, catalog).off == 0
    # another mode is another role, not the feature kept on
    prefill = parse_argv(["--model-path", "m", "--disaggregation-mode", "prefill"], catalog)
    assert intent_cost({"disaggregation_mode": "decode"}, [], prefill, catalog).off == 1
    # the phrase still says what the flag is given instead
    (loss,) = losses({"speculative_algorithm": "EAGLE"}, [], parsed, catalog)
    assert loss.phrase() == "--speculative-algorithm NEXTN (for 'EAGLE')" and not loss.off


@pytest.mark.parametrize(("attr", "short"), [("dp_size", "--dp"), ("tp_size", "--tp")])
def test_the_users_spelling_is_echoed(kb, attr: str, short: str) -> None:
    """Generated incidents whose root cause includes ``attr``, spelled the way the user
    may type it (argparse's abbreviation ``--dp`` for ``--dp-size``; re-spelled in the
    command and the log when the incident used another spelling): every fix touching
    ``attr`` names it as typed, in ``set``/``remove``, ``edits`` and the corrected command,
    and so does the summary when it is the top fix."""
    engine = Engine(kb)
    rels = {r["version"] for r in kb.store.releases()}
    cases = 0
    for inc in load_incidents():
        if inc.release not in rels or not inc.command or not inc.id.startswith("gen-"):
            continue
        catalog = load_catalog(kb.store, inc.release)
        by_flag = catalog.by_flag()
        causes = {by_flag[f].attr for f in inc.expected.root_cause_flags if f in by_flag}
        argv = inc.command_argv()
        parsed = parse_argv(argv, catalog)
        if attr not in causes or attr not in parsed.values:
            continue
        typed = parsed.values[attr].token
        spelled = [short if a == typed else a for a in argv]
        log = inc.crash_log.replace(f" {typed} ", f" {short} ")
        result = _triage(engine, inc, log)
        assert result.parsed.command == spelled, inc.id
        longs = {s for s in catalog.by_attr()[attr].flags}
        for fix in result.fixes:
            keys = set(fix.remove) | set(fix.set)
            if not keys & (longs | {short}):
                continue
            cases += 1
            assert short in keys and not keys & longs, (inc.id, keys)
            assert any(line.split()[1] == short for line in fix.edits), fix.edits
            assert all(line.split()[1] not in longs for line in fix.edits), fix.edits
            assert not longs & set(fix.argv), fix.argv
            if fix is result.fixes[0] and fix.fixes_check == "true":
                said = result.summary.split("fix:")[1]
                assert short in said and not any(f in said for f in longs), result.summary
    if cases == 0 and attr == "tp_size":
        pytest.skip("no fix of these incidents touches --tp (see the fix_out test below)")
    assert cases >= 1


@pytest.mark.parametrize(("attr", "short"), [("dp_size", "--dp"), ("tp_size", "--tp")])
def test_fix_out_names_the_flag_as_typed(kb, attr: str, short: str) -> None:
    """On the commands of the generated incidents that set ``attr``, re-spelled as
    ``short``: removing it, and changing its value, are said in the user's spelling."""
    rels = {r["version"] for r in kb.store.releases()}
    cases = 0
    for inc in load_incidents():
        if inc.release not in rels or not inc.command or not inc.id.startswith("gen-"):
            continue
        catalog = load_catalog(kb.store, inc.release)
        parsed = parse_argv(inc.command_argv(), catalog)
        if attr not in parsed.values:
            continue
        typed = parsed.values[attr].token
        argv = [short if a == typed else a for a in inc.command_argv()]
        mine = parse_argv(argv, catalog)
        value = mine.values[attr].value
        assert mine.spelling(attr) == short
        drop = fix_out(
            1,
            Verdict(Edit(remove=[attr]), True),
            argv,
            catalog,
            mine,
            inc.release,
            prefix="sglang serve",
        )
        assert drop.remove == [short] and drop.edits == [f"- {short} {value}"]
        assert short not in drop.argv and drop.keeps_features and not drop.gives_up
        change = fix_out(
            1,
            Verdict(Edit(set={attr: value + 1}), True),
            argv,
            catalog,
            mine,
            inc.release,
            prefix="sglang serve",
        )
        assert change.set == {short: value + 1}
        assert change.edits == [f"- {short} {value}", f"+ {short} {value + 1}"]
        assert f" {short} {value + 1}" in change.command
        cases += 1
    assert cases >= 3


def test_undecided_candidates_are_offered_for_replay(kb) -> None:
    """The seed incident with two of the values its assert reads lost (a cut-off
    command: unknown, as when neither the command nor the logged server_args give them):
    the check is undecided, the candidates shown to fix it come first, then up to the
    limit those static evaluation cannot decide, each saying which inputs it lacks."""
    inc = next(i for i in load_incidents() if i.id == "seed-attempt-1")
    store = kb.store
    release = inc.expected.release
    catalog = load_catalog(store, release)
    parsed = parse_argv(inc.command_argv(), catalog)
    check = _check_of(store, inc, release)
    assert check is not None
    attrs = base_attrs(catalog, parsed)
    lost = ("speculative_eagle_topk", "speculative_num_draft_tokens")
    for attr in lost:
        attrs[attr] = Value(UNKNOWN, Provenance("unknown", "not in the (cut-off) command"))
    facts, _, _ = Engine(kb).facts_for(
        parse_log(inc.crash_log), inc.hardware, inc.model, inc.model_arch
    )
    ev = evaluate_path(store, release, check, attrs, facts)
    assert ev.fired is UNKNOWN
    verdicts = propose(
        CheckContext(store, release, catalog, check, [], parsed, attrs, facts), ev, limit=8
    )
    status = [v.fixes_check for v in verdicts]
    assert True in status and UNKNOWN in status and len(verdicts) <= 8
    first_unknown = status.index(UNKNOWN)
    assert all(s is True for s in status[:first_unknown])
    assert all(s is UNKNOWN for s in status[first_unknown:])
    for v in verdicts[first_unknown:]:
        out = fix_out(1, v, inc.command_argv(), catalog, parsed, release, prefix="sglang serve")
        assert out.fixes_check == "unknown" and not out.recommended
        assert out.verdict.startswith("undecided statically (the check reads ")
        assert "replay decides" in out.verdict
        assert any(a in out.verdict for a in lost), out.verdict


def test_no_candidate_moves_the_server_to_another_device(kb) -> None:
    """A check whose path reads ``device`` (0.5.5's checks, evaluated on the defaults):
    its candidates may set the other attributes it reads, never the machine's device."""
    from service.engine.fixes.edits import MACHINE, candidate_edits

    store, release = kb.store, "0.5.5"
    if release not in {r["version"] for r in store.releases()}:
        pytest.skip(f"{release} is not in the test KB")
    catalog = load_catalog(store, release)
    parsed = parse_argv(["--model-path", "m"], catalog)
    attrs = base_attrs(catalog, parsed)
    seen = 0
    for check in store.checks(release, path="sglang/srt/server_args.py"):
        ev = evaluate_path(store, release, check, attrs, {})
        if MACHINE.isdisjoint(ev.attrs) or len(ev.attrs) < 2:
            continue
        edits = candidate_edits(store, release, check, ev, parsed, catalog, attrs, {})
        assert all(MACHINE.isdisjoint(e.set) for e in edits), check.id
        seen += any(e.set for e in edits)
    assert seen >= 1
