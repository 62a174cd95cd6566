"""Release-range inference for logs without SGLang frames, against the ingested releases.

Every log here is built from what the KB holds: a check message that only some
releases hold, a flag that only some releases have, read from the store in the
test. The expected range is what the store says, never a hard-coded version.
"""

from __future__ import annotations

import pytest

from kb.catalogs import load_catalog
from kb.store import Store
from service.engine.locate.message import message_pattern
from service.engine.logparse.parse import parse_log
from service.engine.release.range import infer_range, span
from service.engine.release.resolve import resolve_release
from service.engine.release.versions import release_sort_key


@pytest.fixture(scope="module")
def ingested(store: Store) -> list[str]:
    rels = [r["version"] for r in store.releases() if r.get("status") in ("indexed", "complete")]
    assert len(rels) >= 5, "range inference needs several ingested releases"
    return sorted(rels, key=release_sort_key)


def _rows(store: Store, ingested: list[str]) -> list[dict]:
    return sorted(
        (store.require(v) for v in ingested), key=lambda r: release_sort_key(r["version"])
    )


def _literal(src: str) -> str | None:
    """The text of a plain one-piece string literal message, else None."""
    tpl = message_pattern(src)
    if tpl is None or len(tpl.fragments) != 1 or tpl.literal_chars < 45:
        return None
    return tpl.fragments[0]


def _message_held_by_some(store: Store, ingested: list[str]) -> tuple[str, str, list[str]]:
    """(exception type, message, releases holding it): a literal message some releases raise
    and no check of any other release mentions (its first 40 characters appear nowhere)."""
    rows = store.query(
        "SELECT release, message, exc_type FROM checks WHERE kind = 'raise' AND message IS NOT NULL "
        "AND exc_type IN ('ValueError', 'RuntimeError') ORDER BY release, path, start_line"
    )
    holders: dict[str, set[str]] = {}
    types: dict[str, str] = {}
    for r in rows:
        text = _literal(r["message"])
        if text is not None:
            holders.setdefault(text, set()).add(r["release"])
            types[text] = r["exc_type"]
    for text, rels in sorted(holders.items()):
        if not 0 < len(rels) < len(ingested) - 1:
            continue
        head = text[:40]
        others = [v for v in ingested if v not in rels]
        mentioned = store.query(
            f"SELECT 1 FROM checks WHERE release IN ({','.join('?' * len(others))}) "
            "AND instr(message, ?) > 0 LIMIT 1",
            (*others, head),
        )
        if not mentioned:
            return types[text], text, sorted(rels, key=release_sort_key)
    raise AssertionError("no check message is held by only some ingested releases")


def test_message_only_log_gives_the_releases_that_hold_the_check(
    store: Store, ingested: list[str]
) -> None:
    exc, text, holders = _message_held_by_some(store, ingested)
    parsed = parse_log(f"{exc}: {text}\n")
    res = resolve_release(parsed, store)
    assert res.range is not None
    assert res.range.releases == holders
    assert (res.range.first, res.range.last) == (holders[0], holders[-1])
    assert res.release == holders[-1] and res.method == "message"
    piece = next(p for p in res.range.evidence if p.kind == "message")
    assert piece.used and piece.narrowed and span(holders, ingested) in piece.text
    assert all(
        store.file_lines(
            c.split(":")[0], c.split(":")[1], int(c.split(":")[2]), int(c.split(":")[2])
        )
        for c in piece.citations
    )
    assert res.confidence < 0.5 and "pip show sglang" in (res.note or "")
    assert any(span(holders, ingested) in e for e in res.evidence)


def _spellings(store: Store, version: str) -> dict[str, str]:
    rows = store.query("SELECT spelling, attr FROM flag_spellings WHERE release = ?", (version,))
    return {r["spelling"]: r["attr"] for r in rows}


def _flag_in_some(store: Store, ingested: list[str]) -> tuple[str, list[str], list[str]]:
    """(flag, releases with it, releases without it and without any spelling it prefixes)."""
    spellings = {v: _spellings(store, v) for v in ingested}
    every = sorted({f for s in spellings.values() for f in s if f.startswith("--")})
    for flag in every:
        has = [v for v in ingested if flag in spellings[v]]
        lacks = [v for v in ingested if not any(s.startswith(flag) for s in spellings[v])]
        if (
            has
            and len(lacks) >= 2
            and len(has) + len(lacks) == len(ingested)
            and not flag.startswith("--no-")
        ):
            return flag, has, lacks
    raise AssertionError("no flag is in some ingested releases only")


def test_argparse_only_log_gives_the_releases_without_the_flag(
    store: Store, ingested: list[str]
) -> None:
    flag, _, lacks = _flag_in_some(store, ingested)
    log = (
        "usage: launch_server.py [-h] --model-path MODEL_PATH\n"
        f"launch_server.py: error: unrecognized arguments: {flag}\n"
    )
    parsed = parse_log(log)
    rng = infer_range(parsed, store, _rows(store, ingested))
    assert rng.releases == lacks
    res = resolve_release(parsed, store)
    assert res.range is not None and res.range.releases == lacks
    assert res.release == lacks[-1] and res.method == "range"
    piece = next(p for p in res.range.evidence if p.kind == "argparse")
    assert f"`{flag}`" in piece.text and span(lacks, ingested) in piece.text


def test_invalid_choice_gives_the_releases_with_the_listed_choices(
    store: Store, ingested: list[str]
) -> None:
    by_rel = {v: load_catalog(store, v) for v in ingested}
    for v in ingested:
        for spec in by_rel[v].flags:
            if not spec.choices or not spec.flags or len(spec.choices) < 2:
                continue
            flag = spec.flags[0]
            listed = {str(c) for c in spec.choices}
            same = [
                w
                for w in ingested
                if (s := by_rel[w].by_flag().get(flag)) is not None
                and s.choices is not None
                and {str(c) for c in s.choices} == listed
            ]
            if len(same) < len(ingested) and all(
                by_rel[w].by_flag().get(flag) is None
                or by_rel[w].by_flag()[flag].choices is not None
                for w in ingested
            ):
                break
        else:
            continue
        break
    else:
        pytest.skip("no flag's choices differ between ingested releases")
    choices = ", ".join(repr(str(c)) for c in spec.choices)
    log = (
        f"launch_server.py: error: argument {flag}: invalid choice: 'zz-not-a-choice' "
        f"(choose from {choices})\n"
    )
    res = resolve_release(parse_log(log), store)
    assert res.range is not None and res.range.releases == same
    assert res.release == same[-1]


def test_command_only_log_gives_the_releases_that_accept_it(
    store: Store, ingested: list[str]
) -> None:
    flag, has, lacks = _flag_in_some(store, ingested)
    spec = load_catalog(store, has[-1]).by_flag()[flag]
    value = (
        ["1"]
        if spec.takes_value and not spec.choices
        else [str(spec.choices[0])]
        if spec.choices
        else []
    )
    log = (
        f"$ python -m sglang.launch_server --model-path /models/m {flag} {' '.join(value)}\n"
        "RuntimeError: zq\n"
    )
    parsed = parse_log(log)
    assert parsed.command is not None and flag in parsed.command
    accept = [
        v
        for v in has
        if not (
            load_catalog(store, v).by_flag()[flag].choices
            and value
            and value[0] not in map(str, load_catalog(store, v).by_flag()[flag].choices)
        )
    ]
    res = resolve_release(parsed, store)
    assert res.range is not None and res.range.releases == accept
    assert res.release == accept[-1] and res.method == "range"
    piece = next(p for p in res.range.evidence if p.kind == "command")
    assert piece.used and "accept every flag" in piece.text
    assert not set(lacks) & set(res.range.releases)


def test_a_contradicting_piece_is_reported_not_used(store: Store, ingested: list[str]) -> None:
    """The log names the newest release, but the argparse error rules out every release that
    has the flag: the stronger piece (the version named) wins and the other is kept aside."""
    flag, has, lacks = _flag_in_some(store, ingested)
    named = has[-1]
    log = (
        f"Successfully installed sglang-{named}\n"
        f"launch_server.py: error: unrecognized arguments: {flag}\n"
    )
    res = resolve_release(parse_log(log), store)
    assert res.release == named and res.method == "hint"
    assert res.range is not None and res.range.releases == [named]
    piece = next(p for p in res.range.evidence if p.kind == "argparse")
    assert not piece.used and "not used" in piece.text
    assert lacks


def test_logs_with_frames_carry_no_range(store: Store, ingested: list[str]) -> None:
    chk = store.checks(ingested[-1], where="kind = 'raise'")[0]
    fn = store.function(ingested[-1], chk.function, chk.path)
    assert fn is not None
    text = store.file_lines(ingested[-1], chk.path, chk.start_line, chk.start_line)[0]
    log = (
        "Traceback (most recent call last):\n"
        f'  File "/venv/lib/python3.12/site-packages/{chk.path}", line {chk.start_line}, '
        f"in {fn['name']}\n    {text.strip()}\n{chk.exc_type or 'ValueError'}: x\n"
    )
    res = resolve_release(parse_log(log), store)
    assert res.method == "fingerprint" and res.range is None


def test_a_server_args_dump_gives_the_releases_with_those_fields(
    store: Store, ingested: list[str]
) -> None:
    version = ingested[len(ingested) // 2]
    fields = [d.attr for d in load_catalog(store, version).declarations]
    same = [
        v for v in ingested if {d.attr for d in load_catalog(store, v).declarations} == set(fields)
    ]
    dump = ", ".join(f"{f}=None" for f in fields)
    res = resolve_release(parse_log(f"server_args=ServerArgs({dump})\nRuntimeError: zq\n"), store)
    assert res.range is not None and res.range.releases == same
    assert res.release == same[-1] and res.method == "range"
    piece = next(p for p in res.range.evidence if p.kind == "server_args")
    assert piece.used and f"{len(set(fields))} fields" in piece.text
