"""Never set the value the check refuses (issue #28, item 5): :func:`refused_values` reads it
off the atoms that made the check fire, and :func:`propose` drops every candidate setting it.

The evaluations are the real interpreter's on real conditions (a raise's innermost ``if``),
and the generated cases are the shipped incidents' own checks and commands."""

from __future__ import annotations

import pytest

from evals.incidents import load_incidents
from kb.catalogs import load_catalog
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.evaluate.pieces import PiecePart
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Value, evaluate
from service.engine.fixes.edits import candidate_edits, edited_attrs
from service.engine.fixes.filters import refused_values, screened, sets_refused
from service.engine.fixes.model import Edit
from service.engine.fixes.propose import propose
from service.engine.triage import Engine
from tests.service.engine.fixes.incident_cases import evaluated


def _ev(
    condition: str,
    attrs: dict[str, object],
    facts: dict[str, object],
    fired: object = True,
    polarity: bool = True,
) -> PathEvaluation:
    """The path evaluation of ``if <condition>: raise`` (its innermost guard is its test)."""
    env = Env(
        {k: Value(v, Provenance("flag", k)) for k, v in attrs.items()},
        {k: Value(v, Provenance("fact", k)) for k, v in facts.items()},
    )
    res = evaluate(condition, env)
    part = PiecePart(
        role="guard",
        condition=condition,
        polarity=polarity,
        line=1,
        result=res,
        holds=res.truth if polarity else (UNKNOWN if res.truth is UNKNOWN else not res.truth),
        kind="if",
        own_test=True,
    )
    return PathEvaluation(fired=fired, parts=[part], attrs=set(attrs))


def test_an_equality_that_fired_refuses_its_constant() -> None:
    ev = _ev(
        "self.attention_backend == 'trtllm_mha' and not is_sm100_supported()",
        {"attention_backend": "trtllm_mha"},
        {"is_sm100_supported()": False},
    )
    refused = refused_values(ev)
    assert refused == {"attention_backend": ["trtllm_mha"]}
    assert sets_refused(Edit(set={"attention_backend": "trtllm_mha"}), refused)
    assert not sets_refused(Edit(set={"attention_backend": "fa3"}), refused)
    assert not sets_refused(Edit(remove=["attention_backend"]), refused)


def test_a_membership_refuses_every_member_and_an_inequality_refuses_nothing() -> None:
    ev = _ev(
        "self.moe_a2a_backend in ('deepep', 'mooncake') and self.page_size != 1",
        {"moe_a2a_backend": "deepep", "page_size": 64},
        {},
    )
    refused = refused_values(ev)
    assert refused == {"moe_a2a_backend": ["deepep", "mooncake"]}
    # ``page_size != 1`` fired on inequality: 1 is the value it wants, never refused
    assert not sets_refused(Edit(set={"page_size": 1}), refused)
    ev = _ev("self.quantization not in ('fp8', 'modelopt_fp8')", {"quantization": "awq"}, {})
    assert refused_values(ev) == {}


def test_an_undecided_conjunct_held_at_the_crash() -> None:
    """SGLang picked the backend at start-up (unknown statically); the check raised, so each
    conjunct held: the value it compared with is what it refused."""
    ev = _ev(
        "self.attention_backend == 'fa4' and self.speculative_algorithm is not None",
        {"attention_backend": UNKNOWN, "speculative_algorithm": "EAGLE"},
        {},
    )
    assert refused_values(ev) == {"attention_backend": ["fa4"]}
    # not known to have fired, or a disjunction: nothing is inferred about the undecided atom
    unsure = _ev(
        "self.attention_backend == 'fa4' and self.speculative_algorithm is not None",
        {"attention_backend": UNKNOWN, "speculative_algorithm": "EAGLE"},
        {},
        fired=UNKNOWN,
    )
    assert refused_values(unsure) == {}
    either = _ev(
        "self.attention_backend == 'fa4' or self.speculative_algorithm is None",
        {"attention_backend": UNKNOWN, "speculative_algorithm": "EAGLE"},
        {},
    )
    assert refused_values(either) == {}


def _generated(kb, release: str):
    rels = {r["version"] for r in kb.store.releases()}
    return [
        i
        for i in load_incidents()
        if i.release == release
        and release in rels
        and i.id.startswith("gen-")
        and i.command
        and i.expected.location is not None
        and i.expected.location.start_line is not None
    ]


@pytest.mark.parametrize("release", ["0.5.11", "0.5.23"])
def test_no_candidate_of_a_generated_case_sets_a_refused_value(kb, release: str) -> None:
    """On each generated incident: the check's refused values, the raw candidates, and what
    :func:`propose` keeps. Candidates setting a refused value exist (they are dropped), and
    none reaches the proposed fixes."""
    store = kb.store
    engine = Engine(kb)
    catalog = load_catalog(store, release)
    cases = dropped = 0
    for inc in _generated(kb, release)[:25]:
        found = evaluated(engine, release, catalog, inc)
        if found is None:
            continue
        check, parsed, attrs, facts, ev = found
        refused = refused_values(ev)
        if not refused:
            continue
        cases += 1
        raw = candidate_edits(store, release, check, ev, parsed, catalog, attrs, facts)
        kept = screened(
            store,
            release,
            ev,
            raw,
            parsed,
            attrs,
            facts,
            lambda e, a=attrs: edited_attrs(a, e, catalog),
        )
        dropped += sum(1 for e in raw if sets_refused(e, refused))
        assert not any(sets_refused(e, refused) for e in kept), inc.id
        for v in propose(
            CheckContext(store, release, catalog, check, [], parsed, attrs, facts), ev
        ):
            assert not sets_refused(v.edit, refused), (inc.id, v.edit)
    assert cases >= 3
