"""The located check across ingested releases, and flags across releases.

Checks are picked from the store by what it holds: a check of one release whose
message and condition no check of a later release has ("removed"), one whose
message a later release raises under another condition ("changed"). The
expected release is computed from the store, never hard-coded.
"""

from __future__ import annotations

import pytest

from kb.code_types import Check
from kb.store import Store
from service.engine.locate.check_history import check_across, firing_text, upgrade_note
from service.engine.locate.flag_history import flag_history
from service.engine.release.versions import release_sort_key
from service.engine.triage import Engine


@pytest.fixture(scope="module")
def ingested(store: Store) -> list[str]:
    rels = [r["version"] for r in store.releases() if r.get("status") in ("indexed", "complete")]
    return sorted(rels, key=release_sort_key)


def _roots(text: str | None) -> str:
    """Source text with whitespace collapsed and argument objects spelled ``self.``."""
    out = " ".join((text or "").split())
    for root in ("server_args.", "cfg.", "args."):
        out = out.replace(root, "self.")
    return out


def _tests(chk: Check) -> str:
    """An assert's condition, else the guards around a raise (root-insensitive source)."""
    if chk.condition:
        return _roots(chk.condition)
    return " && ".join(_roots(g["condition"]) for g in chk.guards)


def _literal(src: str | None) -> str | None:
    if not src or src[:1] not in "\"'" or "{" in src or "%" in src or len(src) < 50:
        return None
    return src


def _exists(store: Store, citation: str) -> bool:
    rel, path, lines = citation.split(":")
    start = int(lines.split("-")[0])
    return bool(store.file_lines(rel, path, start, start))


def _candidates(store: Store, rel: str):
    """Raise checks of ``rel`` with a long literal message under an ``if``."""
    for chk in store.checks(rel, where="kind = 'raise'"):
        if _literal(chk.message) and chk.guards:
            yield chk


def _removed_later(store: Store, ingested: list[str]) -> tuple[str, Check, list[str]]:
    """(release, check, later releases lacking it): from the first release lacking it on,
    no check has its message and no check of a function of that name has its test."""
    for rel in ingested[:-1]:
        later = ingested[ingested.index(rel) + 1 :]
        for chk in _candidates(store, rel):
            short = chk.function.rsplit(".", 1)[-1]
            lacking = []
            for v in later:
                same_msg = store.checks(v, where="message = ?", params=(chk.message,))
                same_test = [
                    c
                    for c in store.checks(v, where="function LIKE ?", params=(f"%{short}",))
                    if _tests(c) == _tests(chk)
                ]
                lacking.append(not same_msg and not same_test)
            if lacking and lacking[-1]:
                start = len(lacking)
                while start > 0 and lacking[start - 1]:
                    start -= 1
                return rel, chk, later[start:]
    raise AssertionError("no check of an ingested release is gone from later ones")


def test_a_check_removed_later_says_which_upgrade_removes_it(
    store: Store, ingested: list[str]
) -> None:
    rel, chk, gone = _removed_later(store, ingested)
    changes = check_across(store, rel, chk, ingested)
    by_rel = {c.release: c for c in changes}
    assert rel not in by_rel and set(by_rel) == set(ingested) - {rel}
    assert all(by_rel[v].status == "removed" for v in gone)
    note = upgrade_note(rel, changes)
    assert note is not None and note.startswith(f"upgrading to ≥ {gone[0]} removes this check")
    assert all(_exists(store, c) for ch in changes for c in ch.citations)
    assert by_rel[gone[0]].citations[0].startswith(f"{rel}:{chk.path}:{chk.start_line}")


def test_the_triage_answer_carries_the_upgrade(kb, store: Store, ingested: list[str]) -> None:
    rel, chk, gone = _removed_later(store, ingested)
    message = chk.message[1:-1]
    res = Engine(kb).triage(f"{chk.exc_type}: {message}\n", release=rel)
    if res.location is None or res.location.start_line != chk.start_line:
        pytest.skip("the message locates another check of the release")
    assert res.upgrade is not None and f"≥ {gone[0]} removes this check" in res.upgrade
    later = {c.release: c for c in res.later_releases}
    assert later[gone[0]].status == "removed" and later[gone[0]].subject == "check"
    assert "Later releases" in res.explanation
    assert all(_exists(store, c) for c in res.citations)


def test_a_check_changed_later_names_the_new_condition(store: Store, ingested: list[str]) -> None:
    for rel in ingested[:-1]:
        for chk in _candidates(store, rel):
            for v in ingested[ingested.index(rel) + 1 :]:
                same = store.checks(v, where="message = ?", params=(chk.message,))
                if len(same) == 1 and same[0].guards and _tests(same[0]) != _tests(chk):
                    changes = {c.release: c for c in check_across(store, rel, chk, [v])}
                    assert changes[v].status == "changed"
                    assert changes[v].condition == firing_text(same[0])
                    assert "raises the same message" in changes[v].note
                    assert (
                        changes[v]
                        .citations[1]
                        .startswith(f"{v}:{same[0].path}:{same[0].start_line}")
                    )
                    return
    pytest.skip("no check's condition changed under the same message")


def test_a_check_kept_everywhere_has_no_upgrade(store: Store, ingested: list[str]) -> None:
    rel = ingested[0]
    for chk in _candidates(store, rel):
        if all(
            any(
                _tests(c) == _tests(chk)
                for c in store.checks(
                    v, function=chk.function, where="message = ?", params=(chk.message,)
                )
            )
            for v in ingested[1:]
        ):
            changes = check_across(store, rel, chk, ingested)
            assert {c.status for c in changes} <= {"same", "moved"}
            assert upgrade_note(rel, changes) is None
            return
    pytest.skip("no check is unchanged in every ingested release")


def test_flag_history_names_the_release_that_removed_or_renamed_it(
    store: Store, ingested: list[str]
) -> None:
    spell = {
        v: {
            r["spelling"]: r["attr"]
            for r in store.query(
                "SELECT spelling, attr FROM flag_spellings WHERE release = ?", (v,)
            )
        }
        for v in ingested
    }
    for flag in sorted(spell[ingested[0]]):
        gone = [v for v in ingested if flag not in spell[v]]
        if not gone or not flag.startswith("--") or flag not in spell[ingested[0]]:
            continue
        first = gone[0]
        hist = flag_history(store, flag, ingested[-1])
        change = next(c for c in hist.changes if c.release == first)
        before = ingested[ingested.index(first) - 1]
        attr = spell[before][flag]
        if attr in spell[first].values():
            assert change.kind == "renamed" and change.spelling in spell[first]
            assert f"use `{change.spelling}`" in change.text
        else:
            assert change.kind == "removed" and f"removed in {first}" in change.text
        assert change.citation is not None and _exists(store, change.citation)
        if flag not in spell[ingested[-1]]:
            assert change.text in (hist.note or "")
        return
    pytest.skip("every flag of the oldest release is in every ingested release")


def test_validation_checks_are_indexed_once_per_release(store: Store, ingested: list[str]) -> None:
    """Two located validation checks look each other release up through one shared set of
    rows, and each index holds what the single SQL query over both sets held, in order."""
    from service.engine.locate.check_history import _VALIDATION, _index, _key

    rel, other = ingested[-1], ingested[0]
    located = store.checks(rel, where=_VALIDATION)
    a = next(c for c in located if c.path == "sglang/srt/server_args.py")
    b = next(c for c in located if c.function != a.function and c.message != a.message)
    first, second = _index(store, other, a), _index(store, other, b)
    shared = {id(r) for r in first.rows} & {id(r) for r in second.rows}
    assert len(shared) == len(store.checks(other, where=_VALIDATION)) > 0
    short = a.function.rsplit(".", 1)[-1]
    expected = store.checks(
        other,
        where=f"path = ? OR function = ? OR function LIKE ? OR message = ? OR {_VALIDATION}",
        params=(a.path, short, f"%.{short}", a.message or ""),
    )
    assert [(r.path, r.start_line, r.id) for r in first.rows] == [
        (r.path, r.start_line, r.id) for r in expected
    ]
    assert list(first.keys) == [_key(r) for r in expected]


def test_each_release_is_scanned_once_per_check(
    store: Store, ingested: list[str], monkeypatch
) -> None:
    """Asking again how a check stands in the other releases scans no release's index: the
    answers are the first ones."""
    from service.engine.cache import clear_all
    from service.engine.locate import check_history
    from tests.service.engine.counting import calls_of

    rel = ingested[-1]
    check = next(_candidates(store, rel))
    others = ingested[:-1]
    clear_all()
    scans = calls_of(monkeypatch, check_history, "_find")
    first = check_across(store, rel, check, others)
    assert scans[0] == len(others) > 0
    again = check_across(store, rel, check, others)
    assert scans[0] == len(others)
    assert again == first
