"""Locating that does not guess: a frame whose line is no check is cross-checked with the
printed source line too, and a location whose cross-checks fail says so in the answer's
``unknowns`` (a function of 0.5.11 with several bare asserts, read from the KB)."""

from __future__ import annotations

import pytest

from kb.code_types import Check
from kb.store import Store
from service.engine.locate.checked import TRUSTED, doubt_unknowns
from service.engine.locate.localize import locate_by_frames
from service.engine.logparse.parse import parse_log

REL = "0.5.11"
SITE = "/usr/local/lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def store(kb) -> Store:
    return kb.store


@pytest.fixture(scope="module")
def fn(store: Store) -> tuple[str, str]:
    """(path, function) of the first function under ``sglang/srt`` with two bare asserts."""
    row = store.query(
        "SELECT path, function FROM checks WHERE release = ? AND kind = 'assert' "
        "AND bare = 1 AND path LIKE 'sglang/srt/%' GROUP BY path, function "
        "HAVING count(*) >= 2 ORDER BY path, function LIMIT 1",
        (REL,),
    )[0]
    return row["path"], row["function"]


def _log(fn: tuple[str, str], line: int, source: str) -> str:
    return (
        f"$ python -m sglang.launch_server --model-path m\n"
        f'Traceback (most recent call last):\n  File "{SITE}/{fn[0]}", line {line}, in '
        f"{fn[1].rsplit('.', 1)[-1]}\n    {source.strip()}\nAssertionError\n"
    )


def _bare_asserts(store: Store, fn: tuple[str, str]) -> list[Check]:
    return [
        c
        for c in store.checks(REL, path=fn[0])
        if c.function == fn[1] and c.kind == "assert" and c.bare
    ]


def _off_check_line(store: Store, fn: tuple[str, str]) -> int:
    """A line of the function inside no check (its ``def`` line)."""
    row = store.query(
        "SELECT start_line FROM functions WHERE release = ? AND path = ? AND qualname = ?",
        (REL, fn[0], fn[1]),
    )[0]
    return int(row["start_line"])


def test_function_kind_takes_the_check_holding_the_printed_line(
    store: Store, fn: tuple[str, str]
) -> None:
    rows = _bare_asserts(store, fn)
    far = max(rows, key=lambda c: c.start_line)  # not the nearest to the def line
    printed = store.file_lines(REL, fn[0], far.start_line, far.start_line)[0]
    exc = parse_log(_log(fn, _off_check_line(store, fn), printed)).primary
    assert exc is not None
    got = locate_by_frames(exc, store, REL, {})
    assert got is not None and got.method == "function_kind"
    assert got.check.id == far.id
    assert not any("not a line of this check" in n for n in got.notes)
    assert doubt_unknowns(got, REL) == []


def test_function_kind_with_a_printed_line_no_candidate_holds_is_doubted(
    store: Store, fn: tuple[str, str]
) -> None:
    exc = parse_log(_log(fn, _off_check_line(store, fn), "assert zzz_not_in_sglang(self)")).primary
    assert exc is not None
    got = locate_by_frames(exc, store, REL, {})
    assert got is not None and got.method == "function_kind" and got.confidence <= 0.5
    assert any("which is not a line of this check" in n for n in got.notes)
    (unknown,) = doubt_unknowns(got, REL)
    assert unknown.what == "whether this check raised the crash"
    assert "zzz_not_in_sglang" in unknown.why and got.check.path in unknown.why


def test_the_answer_lists_a_contradicted_location_in_unknowns(
    kb,
    store: Store,
    fn: tuple[str, str],
) -> None:
    """A frame on a check's line, printing a line that is nowhere near: the triage's
    confidence stays below 0.8 and ``unknowns`` says what did not match."""
    from service.engine.triage import Engine

    row = _bare_asserts(store, fn)[0]
    out = Engine(kb).triage(_log(fn, row.start_line, "assert zzz_not_in_sglang(self)"), release=REL)
    assert out.status == "located" and out.confidence < TRUSTED
    assert out.location is not None and out.location.confidence < TRUSTED
    doubts = [u for u in out.unknowns if u.what == "whether this check raised the crash"]
    assert len(doubts) == 1 and "zzz_not_in_sglang" in doubts[0].why
    # the same frame printing the check's own line is trusted and has no such entry
    own = store.file_lines(REL, fn[0], row.start_line, row.start_line)[0]
    fine = Engine(kb).triage(_log(fn, row.start_line, own), release=REL)
    assert fine.location is not None and fine.location.confidence >= TRUSTED
    assert not [u for u in fine.unknowns if u.what == "whether this check raised the crash"]
