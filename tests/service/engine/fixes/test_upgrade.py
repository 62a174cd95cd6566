"""Upgrading as the fix: a check gone from (or passing in) later ingested releases.

Checks are picked from the store by what it holds (the same way as
``tests/service/engine/locate/test_check_history.py``); the expected release comes from
the store, never a literal.
"""

from __future__ import annotations

import pytest

from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.evaluate.path_condition import base_attrs, evaluate_path
from service.engine.explain.across import check_changes
from service.engine.expr.interpreter import UNKNOWN
from service.engine.fixes.upgrade import upgrade_fix
from service.engine.flags.parse import parse_argv
from service.engine.release.versions import release_sort_key
from service.engine.triage import Engine

from ..locate.test_check_history import _candidates, _exists, _tests


@pytest.fixture(scope="module")
def ingested(store: Store) -> list[str]:
    rels = [r["version"] for r in store.releases() if r.get("status") in ("indexed", "complete")]
    return sorted(rels, key=release_sort_key)


def _all_truly_removed(store: Store, ingested: list[str]):
    """(release, check, later releases lacking it) for each check whose later releases keep
    neither a check of its function nor one reading its flags: the upgrade is sure."""
    from service.engine.fixes.upgrade import _function_checks, _same_flags_checks, _tested_attrs

    for rel in ingested[:-1]:
        for chk in _candidates(store, rel):
            later = [
                c
                for c in check_changes(store, rel, chk, {"release": rel})[0]
                if c.subject == "check"
            ]
            if not later or later[-1].status != "removed":
                continue
            start = len(later)
            while start > 0 and later[start - 1].status == "removed":
                start -= 1
            gone = [c.release for c in later[start:]]
            if all(
                not _function_checks(store, v, chk)
                and not _same_flags_checks(store, v, _tested_attrs(chk), chk.path)
                for v in gone
            ):
                yield rel, chk, gone


def _truly_removed(store: Store, ingested: list[str]) -> tuple[str, Check, list[str]]:
    found = next(_all_truly_removed(store, ingested), None)
    if found is None:
        pytest.skip("no check is gone, with its function's checks, from later releases")
    return found


def test_a_check_removed_later_gets_upgrade_first(kb, store: Store, ingested: list[str]) -> None:
    for rel, chk, gone in _all_truly_removed(store, ingested):  # noqa: B007 - used after
        res = Engine(kb).triage(f"{chk.exc_type}: {chk.message[1:-1]}\n", release=rel)
        if res.location is not None and res.location.start_line == chk.start_line:
            break  # its message locates it (others share a message with another check)
    else:
        pytest.skip("no such check is located by its message alone")
    up = res.upgrade_fix
    assert up is not None and up.release == gone[0] and up.status == "removed" and up.sure
    assert up.install == f'pip install "sglang=={gone[0]}"'
    assert up.citations[0].startswith(f"{rel}:{chk.path}:{chk.start_line}")
    assert all(_exists(store, c) for c in up.citations)
    assert set(up.citations) <= set(res.citations)  # the answer's citations hold them
    assert any("not ingested" in n for n in up.not_checked)  # honest about what it did not see
    # first in the summary and the explanation, before any flag fix
    assert f"upgrade to SGLang ≥ {gone[0]}" in res.summary
    assert res.explanation.startswith("**Upgrade first:**")
    if res.no_flag_fix:
        assert res.no_flag_fix.startswith(f"upgrade to SGLang ≥ {gone[0]}")


def test_a_flag_the_upgrade_lacks_makes_it_unsure(store: Store, ingested: list[str]) -> None:
    rel, chk, gone = _truly_removed(store, ingested)
    later = check_changes(store, rel, chk, {"release": rel})[0]
    target = {s for f in store.flags(gone[0]) for s in f["flags"]}
    old_only = sorted(
        s
        for f in store.flags(rel)
        for s in f["flags"]
        if s.startswith("--") and s not in target and not f.get("choices")
    )
    if not old_only:
        pytest.skip(f"every flag of {rel} exists in {gone[0]}")
    flag = old_only[0]
    up = upgrade_fix(
        store, rel, chk, later, [flag], None, {}, prefix="python -m sglang.launch_server"
    )
    assert up is not None and not up.sure and flag in up.flags_missing
    assert up.not_checked[0].startswith(f"{gone[0]} does not know {flag}")
    clean = upgrade_fix(
        store, rel, chk, later, [], None, {}, prefix="python -m sglang.launch_server"
    )
    assert clean is not None and clean.sure and not clean.flags_missing


def test_a_changed_check_is_evaluated_with_the_later_release_catalog(
    store: Store, ingested: list[str]
) -> None:
    """A check whose later release raises the same message under another test: the upgrade's
    verdict for that release is the later check evaluated with the user's flags there."""
    for rel in ingested[:-1]:
        for chk in _candidates(store, rel):
            later = [
                c
                for c in check_changes(store, rel, chk, {"release": rel})[0]
                if c.subject == "check"
            ]
            changed = [c for c in later if c.status == "changed"]
            if not changed or later[-1].status not in ("changed", "removed"):
                continue
            up = upgrade_fix(store, rel, chk, later, [], None, {}, prefix="p")
            last = later[-1]
            if last.status != "changed":
                continue
            relx, path, lines = last.citations[-1].split(":", 2)
            row = store.checks(
                relx, path=path, where="start_line = ?", params=(int(lines.split("-")[0]),)
            )[0]
            catalog = load_catalog(store, relx)
            fired = evaluate_path(
                store, relx, row, base_attrs(catalog, parse_argv([], catalog)), {}
            ).fired
            if fired is True:
                assert up is None  # the newest release still refuses the command
            else:
                assert up is not None
                want = "may_pass" if fired is UNKNOWN else "passes"
                if up.release == relx:
                    assert up.status == want
                if want == "may_pass":  # an undecided release on the way is never sure
                    assert not up.sure
            return
    pytest.skip("no check changed in the newest ingested release")


def test_a_check_kept_everywhere_offers_no_upgrade(store: Store, ingested: list[str]) -> None:
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
            later = check_changes(store, rel, chk, {"release": rel})[0]
            assert upgrade_fix(store, rel, chk, later, [], None, {}, prefix="p") is None
            return
    pytest.skip("no check is unchanged in every ingested release")


def test_a_removed_check_whose_flags_a_later_check_reads_is_judged_by_that_check(
    store: Store, ingested: list[str]
) -> None:
    """History may call a check removed that lives on reworded elsewhere (0.5.19+ moved
    validation into hooks) or in the same function: later checks under the same part of
    SGLang that read the same flags, or of the same function, decide, and are cited."""
    from service.engine.fixes.upgrade import _same_flags_checks, _tested_attrs

    for rel in ingested[:-1]:
        for chk in store.checks(rel, path="sglang/srt/server_args.py"):
            attrs = _tested_attrs(chk)
            if not attrs or not chk.message:
                continue
            later = check_changes(store, rel, chk, {"release": rel})[0]
            gone = [c for c in later if c.subject == "check" and c.status == "removed"]
            if len(gone) != len(later) or not gone:
                continue  # removed in every later release: the case this guards
            similar = _same_flags_checks(store, gone[0].release, attrs, chk.path)
            if not similar:
                continue
            up = upgrade_fix(store, rel, chk, later, [], None, {}, prefix="p")
            assert up is not None and up.status != "removed"
            assert "read the same flags or sit in the same function" in up.note
            assert up.citations[-1].startswith(f"{gone[0].release}:")  # the check judged
            assert all(_exists(store, c) for c in up.citations)
            assert all(a in (similar[0].condition or "") + str(similar[0].guards) for a in attrs)
            return
    pytest.skip("no removed check has a later check reading its flags")
