"""Backend values by GPU generation and model architecture (issue #28, item 5): a candidate
setting a ``*_backend`` flag to a value an error rule card of the release refuses on the
declared machine or model is dropped before ranking, and the card is cited on the other
values of that flag. Cases are the shipped generated incidents of one release."""

from __future__ import annotations

import pytest

from evals.incidents import load_incidents
from kb.catalogs import load_catalog
from service.engine.evaluate.context import CheckContext
from service.engine.fixes.edits import candidate_edits, edited_attrs
from service.engine.fixes.filters import backend_refusals, screened
from service.engine.fixes.propose import propose
from service.engine.rules.checker import cards_for, evaluate_cards
from service.engine.triage import Engine
from tests.service.engine.fixes.incident_cases import evaluated

RELEASE = "0.5.23"


@pytest.fixture(scope="module")
def cases(kb):
    """(incident, check, parsed, attrs, facts, raw candidates, refusals) for every generated
    incident of the release with a candidate setting a backend flag."""
    store = kb.store
    if RELEASE not in {r["version"] for r in store.releases()}:
        pytest.skip(f"{RELEASE} not ingested")
    engine = Engine(kb)
    catalog = load_catalog(store, RELEASE)
    out = []
    for inc in load_incidents():
        loc = inc.expected.location
        if (
            inc.release != RELEASE
            or not inc.id.startswith("gen-")
            or not inc.command
            or loc is None
            or loc.start_line is None
        ):
            continue
        found = evaluated(engine, RELEASE, catalog, inc)
        if found is None:
            continue
        check, parsed, attrs, facts, ev = found
        raw = candidate_edits(store, RELEASE, check, ev, parsed, catalog, attrs, facts)
        if not any(a.endswith("_backend") for e in raw for a in e.set):
            continue
        refusals = _refusals(store, catalog, raw, parsed, attrs, facts)
        out.append((inc, check, ev, parsed, attrs, facts, raw, refusals))
    return out


def _refusals(store, catalog, raw, parsed, attrs, facts, among=None) -> dict:
    """:func:`backend_refusals` of the candidates ``raw`` (judged among ``among``)."""
    return backend_refusals(
        store,
        RELEASE,
        raw,
        attrs,
        facts,
        parsed,
        lambda e: edited_attrs(attrs, e, catalog),
        among=among,
    )


def test_refused_backends_are_dropped_citing_a_card_that_reads_the_machine(kb, cases) -> None:
    store = kb.store
    catalog = load_catalog(store, RELEASE)
    cards = {c.id: c for c in cards_for(store, RELEASE)}
    dropped = 0
    for inc, check, ev, parsed, attrs, facts, raw, refusals in cases:
        for key, why in refusals.items():
            dropped += 1
            card = cards[why.card]
            assert card.severity == "error" and why.attr in card.reads, (inc.id, why)
            assert why.citation in card.citations
            edit = next(e for e in raw if e.key() == key)
            after = evaluate_cards(
                store, RELEASE, edited_attrs(attrs, edit, catalog), facts, parsed, cards=[card]
            )[0]
            before = evaluate_cards(store, RELEASE, attrs, facts, parsed, cards=[card])[0]
            assert after.verdict == "violated" and before.verdict != "violated", (inc.id, why)
            # without the machine and model, the card cannot say: nothing is dropped
            assert key not in _refusals(store, catalog, [edit], parsed, attrs, {})
        kept = _screened(store, catalog, (inc, check, ev, parsed, attrs, facts, raw, refusals))
        assert not any(e.key() in refusals for e in kept), inc.id
        for e in kept:
            refused_attrs = {why.attr for why in refusals.values()}
            if refused_attrs & set(e.set):
                assert any("left out: rule" in n for n in e.notes), (inc.id, e.set)
        proposed = propose(
            CheckContext(store, RELEASE, catalog, check, [], parsed, attrs, facts), ev
        )
        assert not any(v.edit.key() in refusals for v in proposed), inc.id
    assert len(cases) >= 3 and dropped >= 1


def _screened(store, catalog, case, flags: list[str] | None = None) -> list:
    """The case's candidates :func:`screened` keeps (backend refusals judged among ``flags``)."""
    _inc, _check, ev, parsed, attrs, facts, raw, _refused = case
    return screened(
        store,
        RELEASE,
        ev,
        raw,
        parsed,
        attrs,
        facts,
        lambda e: edited_attrs(attrs, e, catalog),
        among=flags,
    )


def _notes(store, catalog, case, flags: list[str] | None, among: list[str]) -> dict:
    """The notes of the edits :func:`screened` keeps (judged among ``flags``) that set only
    flags of ``among``."""
    kept = _screened(store, catalog, case, flags)
    return {e.key(): list(e.notes) for e in kept if set(e.set) <= set(among)}


def test_refusals_among_some_flags_are_those_of_the_whole_answer(kb, cases) -> None:
    """Judged only for the edits setting some flags (``among``: those of the candidates
    that may be listed), each refusal found is the one found judging every edit, and an
    edit setting only those flags gets the same notes."""
    store = kb.store
    catalog = load_catalog(store, RELEASE)
    compared = 0
    for case in cases:
        inc, _check, _ev, parsed, attrs, facts, raw, refusals = case
        backends = sorted({a for e in raw for a in e.set if a.endswith("_backend")})
        for among in ([backends[0]], backends[1:], []):
            part = _refusals(store, catalog, raw, parsed, attrs, facts, among)
            assert part == {
                k: why
                for k, why in refusals.items()
                if set(among) & set(next(e for e in raw if e.key() == k).set)
            }, (inc.id, among)
            some = _notes(store, catalog, case, among, among)
            every = _notes(store, catalog, case, None, among)  # last: the whole answer's notes
            assert {k: v for k, v in some.items() if k in every} == every, inc.id
            compared += bool(every)
    assert compared >= 1
