"""A frame's line is cross-checked with the source line the log printed under it and with
the message before the location is trusted (checks picked from 0.5.11's store)."""

from __future__ import annotations

from kb.code_types import Check
from kb.store import Store
from service.engine.locate.localize import locate_by_frames
from service.engine.logparse.parse import parse_log

PATH = "sglang/srt/server_args.py"
SITE = "/usr/local/lib/python3.11/site-packages"


def _log(line: int, source: str, tail: str) -> str:
    return (
        f'Traceback (most recent call last):\n  File "{SITE}/{PATH}", line {line}, in '
        f"_handle_x\n    {source.strip()}\n{tail}"
    )


def _asserts(store: Store) -> list[tuple[Check, str]]:
    """Bare asserts of 0.5.11's server_args.py whose first line is unique to them."""
    rows = store.checks("0.5.11", path=PATH, where="kind = 'assert'")
    out = []
    for r in rows:
        first = store.file_lines("0.5.11", PATH, r.start_line, r.start_line)[0].strip()
        if (
            first.startswith("assert ")
            and len(first) > 20
            and sum(
                1
                for x in rows
                if x is not r
                and first in "".join(store.file_lines("0.5.11", PATH, x.start_line, x.end_line))
            )
            == 0
        ):
            out.append((r, first))
    return out


def test_a_printed_line_of_a_neighbouring_check_wins_over_the_line_number(store: Store) -> None:
    rows = _asserts(store)
    (a, a_first), (b, b_first) = next(
        (x, y)
        for x, y in zip(rows, rows[1:], strict=False)
        if 0 < y[0].start_line - x[0].start_line < 60
    )
    exc = parse_log(_log(a.start_line, b_first, "AssertionError\n")).primary
    assert exc is not None
    got = locate_by_frames(exc, store, "0.5.11", {})
    assert got is not None and got.method == "frame_source"
    assert got.check.start_line == b.start_line and got.alternatives[0].id == a.id
    assert any("that is line" in n for n in got.notes) and got.confidence == 0.9
    # the same frame with the check's own line printed: exact, as before
    own = parse_log(_log(a.start_line, a_first, "AssertionError\n")).primary
    assert own is not None
    same = locate_by_frames(own, store, "0.5.11", {})
    assert same is not None and (same.method, same.confidence) == ("frame_line", 0.97)


def test_a_printed_line_no_check_holds_lowers_the_confidence(store: Store) -> None:
    a = _asserts(store)[0][0]
    exc = parse_log(_log(a.start_line, "assert zzz_not_in_sglang == 1", "AssertionError\n")).primary
    assert exc is not None
    got = locate_by_frames(exc, store, "0.5.11", {})
    assert got is not None and got.check.id == a.id and got.confidence == 0.5
    assert any("which is not a line of this check" in n for n in got.notes)


def test_a_message_another_check_raises_lowers_the_confidence(store: Store) -> None:
    raises = [
        r
        for r in store.checks("0.5.11", path=PATH, where="kind = 'raise'")
        if r.message
        and r.message[:1] in "\"'"
        and "{" not in r.message
        and "%" not in r.message
        and len(r.message) > 40
        and r.exc_type
    ]
    a = raises[0]
    b = next(
        r for r in raises if r.exc_type == a.exc_type and r.id != a.id and r.message != a.message
    )
    src = store.file_lines("0.5.11", PATH, a.start_line, a.start_line)[0]
    exc = parse_log(_log(a.start_line, src, f"{b.exc_type}: {b.message[1:-1]}\n")).primary
    assert exc is not None
    got = locate_by_frames(exc, store, "0.5.11", {})
    assert got is not None and got.check.id == a.id and got.confidence == 0.5
    assert any("does not fit" in n for n in got.notes)
    ok = parse_log(_log(a.start_line, src, f"{a.exc_type}: {a.message[1:-1]}\n")).primary
    assert ok is not None
    fine = locate_by_frames(ok, store, "0.5.11", {})
    assert fine is not None and fine.confidence == 0.97
