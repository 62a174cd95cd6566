"""The KB's read-only catalogs cache their lookups; flag parsing over them (with a cached
option table and a prefix index) answers exactly as over a plain catalog."""

from __future__ import annotations

import shlex

import pytest

from kb.catalog_types import Catalog
from kb.catalogs import IndexedCatalog, load_catalog
from service.engine.flags.edit import apply_edits
from service.engine.flags.parse import parse_argv
from service.engine.flags.scan import OptionScanner

COMMANDS = [
    "--model-path /m --tp 8 --speculative-algo EAGLE3 --speculative-eagle-topk 4",
    "--model-path=/m --tp-size=2 --mem-frac 0.8 --enable-dp --dp 2 --page 16",
    "--model /m --quant fp8 --kv-cache-dtype fp8_e5m2 --attention-backend triton -h",
    "--model-path /m --speculative --spec-algo NEXTN --unknown-flag 3 --disable-radix",
]
TOKENS = [
    "--tp",
    "--speculative",
    "--spec",
    "--mem",
    "--enable-dp",
    "--page",
    "--x",
    "-h",
    "-hx",
    "--",
    "--attention",
    "--model",
    "--disable-r",
    "--kv",
]


@pytest.fixture(scope="module", params=["0.5.11", "0.5.23"])
def catalogs(request, kb) -> tuple[IndexedCatalog, Catalog]:
    indexed = load_catalog(kb.store, request.param)
    assert isinstance(indexed, IndexedCatalog)
    return indexed, Catalog(flags=list(indexed.flags), declarations=list(indexed.declarations))


def test_cached_lookups_equal_the_plain_ones(catalogs) -> None:
    indexed, plain = catalogs
    assert indexed.by_flag() == plain.by_flag() and indexed.by_attr() == plain.by_attr()
    assert list(indexed.by_flag()) == list(plain.by_flag())
    for attr in ["tp_size", "page_size", "speculative_algorithm", "no_such_attr"]:
        assert indexed.declaration(attr) == plain.declaration(attr)
        assert indexed.specs_for(attr) == plain.specs_for(attr)
    mine = indexed.by_attr()
    mine.clear()  # callers get their own dict
    assert indexed.by_attr()


def test_prefix_index_matches_the_scan(catalogs) -> None:
    indexed, plain = catalogs
    fast, slow = OptionScanner(indexed), OptionScanner(plain)
    assert fast._index is not None and slow._index is None
    for tok in TOKENS + [o[:n] for o in list(plain.by_flag())[:40] for n in (3, 6, 9)]:
        assert fast.prefix_matches(tok) == slow.prefix_matches(tok), tok


def test_parse_and_edit_answer_alike(catalogs) -> None:
    indexed, plain = catalogs
    for text in COMMANDS:
        argv = shlex.split(text)
        a, b = parse_argv(argv, indexed), parse_argv(argv, plain)
        assert a.values == b.values and a.errors == b.errors and a.unknown == b.unknown
        assert a.abbreviations == b.abbreviations
        edit = {"set": {"tp_size": 4}, "remove": ["page_size"]}
        assert apply_edits(argv, indexed, **edit) == apply_edits(argv, plain, **edit)
