"""Curated cards: schema, model, citations against the KB, and their own examples."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kb.errors import ConfigError
from kb.rules.cards import (
    RULES_DIR,
    Card,
    citation_problem,
    load_card_file,
    load_curated,
    parse_citation,
    schema_errors,
)
from kb.store import Store
from service.engine.rules.checker import evaluate_cards, facts_for, prepare_flags

CURATED = load_curated()


def _raw_records() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(RULES_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for item in data if isinstance(data, list) else [data]:
            out.append((path.name, item))
    return out


def test_curated_cards_cover_the_brief() -> None:
    ids = {c.id for c in CURATED}
    assert len(CURATED) >= 10
    assert all(c.origin == "curated" for c in CURATED)
    for needed in (
        "c-trtllm-mha-topk1",
        "c-dp-attention-reset-dp1",
        "c-dsv4-nextn-raw-string",
        "c-tbo-needs-attn-dp",
        "c-trtllm-mha-gpu-0523",
        "c-mla-page-size",
        "c-deprecated-stream-output",
    ):
        assert needed in ids
    assert all(c.examples for c in CURATED), "every curated card has examples"


@pytest.mark.parametrize("name,item", _raw_records(), ids=lambda v: v if isinstance(v, str) else "")
def test_schema_validates_every_curated_card(name: str, item: dict) -> None:
    assert schema_errors(item) == [], f"{name}: {item.get('id')}"


def test_schema_and_model_refuse_bad_cards(tmp_path: Path) -> None:
    good = {
        "id": "c-x",
        "title": "a card",
        "releases": ">=0.5.9",
        "require": "args.tp_size > 0",
        "severity": "error",
        "message": "m",
        "citations": ["0.5.11:a.py:f:1-2"],
        "origin": "curated",
    }
    assert schema_errors(good) == []
    assert schema_errors({**good, "severity": "fatal"})
    assert schema_errors({**good, "surprise": 1})
    assert schema_errors({**good, "citations": ["0.5.11:a.py:1"]})
    Card.model_validate(good)
    for bad in (
        {"require": "__import__('os').system('x')"},
        {"when": "(lambda: 1)()"},
        {"require": "[x for x in args.y]"},
        {"releases": "around 0.5"},
    ):
        with pytest.raises(ValueError):
            Card.model_validate({**good, **bad})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump([{**good, "require": "args.__class__"}]))
    with pytest.raises(ConfigError):
        load_card_file(path)


def test_citation_format() -> None:
    c = parse_citation("0.5.11:sglang/srt/server_args.py:ServerArgs._handle_x:3519-3522")
    assert (c.release, c.path, c.function, c.start, c.end) == (
        "0.5.11",
        "sglang/srt/server_args.py",
        "ServerArgs._handle_x",
        3519,
        3522,
    )
    assert str(parse_citation("0.5.9:a.py:f:7")) == "0.5.9:a.py:f:7"
    with pytest.raises(ValueError):
        parse_citation("0.5.11:a.py:f:9-3")


def test_every_curated_citation_exists_in_the_kb(store: Store) -> None:
    problems = [
        (c.id, cit, p)
        for c in CURATED
        for cit in c.citations
        if (p := citation_problem(store, cit)) is not None
    ]
    assert problems == []
    assert citation_problem(store, "0.5.11:sglang/srt/server_args.py:ServerArgs.nope:1-2")
    assert citation_problem(
        store, "0.5.11:sglang/srt/server_args.py:ServerArgs._handle_data_parallelism:1-2"
    )
    assert citation_problem(store, "0.4.0:sglang/srt/server_args.py:f:1-2")


def test_curated_citations_cover_their_range(store: Store) -> None:
    ingested = [r["version"] for r in store.releases()]
    for c in CURATED:
        cited = {parse_citation(x).release for x in c.citations}
        assert cited <= set(ingested)
        for rel in ingested:
            if c.applies_to(rel):
                assert rel in cited, f"{c.id} applies to {rel} but cites no line of it"


def _examples() -> list[tuple[Card, object]]:
    return [(c, ex) for c in CURATED for ex in c.examples]


@pytest.mark.parametrize(
    "card,example",
    _examples(),
    ids=[f"{c.id}@{e.release}-{e.hardware or 'nohw'}" for c, e in _examples()],
)
def test_curated_examples_evaluate_as_stated(store: Store, card: Card, example) -> None:
    facts = facts_for(example.hardware, example.model_arch)
    for kind, argv in (("fail", example.fail), ("pass", example.pass_)):
        if not argv:
            continue
        attrs, parsed = prepare_flags(store, example.release, argv)
        assert not parsed.errors and not parsed.unknown, (kind, parsed.errors, parsed.unknown)
        res = evaluate_cards(store, example.release, attrs, facts, parsed, cards=[card])[0]
        if kind == "fail":
            assert res.verdict == "violated", (kind, res.reason)
        else:
            assert res.verdict in ("satisfied", "not_applicable"), (kind, res.reason)
