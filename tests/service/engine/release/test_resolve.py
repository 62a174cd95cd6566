"""Release resolution against the real ingested releases (the suite's, 0.5.5 to 0.5.23).

Every traceback here is built from the KB: line numbers and printed source
lines are read from a release's stored files and checks, then shifted to
imitate a dev build. Nothing depends on a hard-coded line number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from kb.code_types import Check
from kb.store import Store, pack_text
from service.engine.logparse.parse import parse_log
from service.engine.release.resolve import resolve_release
from service.engine.release.versions import release_sort_key

SITE = "/venv/lib/python3.12/site-packages"
SERVER_ARGS = "sglang/srt/server_args.py"
SPEC_FN = "ServerArgs._handle_speculative_decoding"


@dataclass(frozen=True)
class F:
    """A frame to print: package path, line, function name, printed source line."""

    path: str
    line: int
    function: str
    source: str


@pytest.fixture(scope="module")
def store(kb) -> Store:
    return kb.store


def line_text(store: Store, version: str, path: str, line: int) -> str:
    return store.file_lines(version, path, line, line)[0].strip()


def call_site(store: Store, version: str, path: str, qualname: str, needle: str) -> F:
    """The frame for the first line of ``qualname`` (in ``path``) that contains ``needle``."""
    fn = store.function(version, qualname, path)
    assert fn is not None, (version, qualname)
    body = store.file_lines(version, path, fn["start_line"], fn["end_line"])
    for i, text in enumerate(body):
        if needle in text:
            return F(path, fn["start_line"] + i, fn["name"], text.strip())
    raise AssertionError(f"{needle!r} not in {qualname} of {version}")


def seed_assert(store: Store, version: str = "0.5.11") -> Check:
    """The one bare assert of ``_handle_speculative_decoding`` (the seed case's crash site)."""
    bare = store.checks(version, path=SERVER_ARGS, function=SPEC_FN, where="bare = 1")
    assert len(bare) == 1
    return bare[0]


def seed_frames(store: Store, version: str = "0.5.11") -> list[F]:
    """Outermost first: prepare_server_args -> from_cli_args -> __post_init__ -> the assert."""
    chk = seed_assert(store, version)
    return [
        call_site(store, version, SERVER_ARGS, "prepare_server_args", "from_cli_args("),
        call_site(store, version, SERVER_ARGS, "ServerArgs.from_cli_args", "return cls("),
        call_site(
            store,
            version,
            SERVER_ARGS,
            "ServerArgs.__post_init__",
            "self._handle_speculative_decoding()",
        ),
        F(
            SERVER_ARGS,
            chk.start_line,
            "_handle_speculative_decoding",
            line_text(store, version, SERVER_ARGS, chk.start_line),
        ),
    ]


def shift(frames: list[F], delta: int) -> list[F]:
    return [F(f.path, f.line + delta, f.function, f.source) for f in frames]


def render(frames: list[F], *, exc: str = "AssertionError", head: str = "") -> str:
    lines = [head] if head else []
    lines.append("Traceback (most recent call last):")
    lines.append('  File "<frozen runpy>", line 198, in _run_module_as_main')
    for f in frames:
        lines.append(f'  File "{SITE}/{f.path}", line {f.line}, in {f.function}')
        lines.append(f"    {f.source}")
    lines.append(exc)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ fingerprint


def test_exact_frames_fingerprint_0511(store: Store) -> None:
    parsed = parse_log(render(seed_frames(store)))
    res = resolve_release(parsed, store)
    assert res.release == "0.5.11"
    assert res.method == "fingerprint"
    assert res.confidence >= 0.9
    assert not res.dev_build
    assert res.line_offsets == {SERVER_ARGS: 0}
    best = res.candidates[0]
    assert best.release == "0.5.11" and best.matched_frames == best.total_frames == 4
    others = {c.release: c for c in res.candidates[1:]}
    assert set(others) == {r["version"] for r in store.releases()} - {"0.5.11"}
    assert all(c.score < best.score for c in others.values())


def test_warm_resolution_reads_no_file_rows(store: Store, monkeypatch) -> None:
    """Once a file's lines, functions and checks are cached per release, resolving again
    reads none of them from the KB: only the list of releases, once per call."""
    parsed = parse_log(render(shift(seed_frames(store), 79), head="SGLang 0.5.19.dev410+gabc"))
    first = resolve_release(parsed, store)  # warm the per-file caches
    sqls: list[str] = []
    query = store.query

    def counting_query(sql: str, params=()):
        sqls.append(sql)
        return query(sql, params)

    monkeypatch.setattr(store, "query", counting_query)
    for _ in range(5):
        res = resolve_release(parsed, store)
        assert (res.release, res.method) == (first.release, first.method)
    per_file = [q for q in sqls if re.search(r"\bFROM\s+(files|functions|checks)\b", q)]
    assert not per_file, per_file
    assert len(sqls) <= 5, sqls


def test_arg_groups_frames_pick_0523(store: Store) -> None:
    path = "sglang/srt/arg_groups/speculative_hook.py"
    chk = next(c for c in store.checks("0.5.23", path=path) if c.kind == "raise")
    fn = store.function("0.5.23", chk.function, path)
    assert fn is not None
    frame = F(path, chk.start_line, fn["name"], line_text(store, "0.5.23", path, chk.start_line))
    parsed = parse_log(render([frame], exc="ValueError: boom"))
    res = resolve_release(parsed, store)
    assert res.release == "0.5.23" and res.method == "fingerprint"
    assert res.confidence >= 0.9
    missing = {c.release for c in res.candidates if c.score == 0}
    assert "0.5.9" in missing and "0.5.11" in missing  # those releases have no arg_groups/
    assert missing >= {
        r["version"] for r in store.releases() if store.file_text(r["version"], path) is None
    }


def test_identical_file_ties_are_broken_by_hints(store: Store) -> None:
    rows = store.query(
        "SELECT f.path, f.start_line, f.end_line, f.name FROM functions f "
        "JOIN files a ON a.release = '0.5.11' AND a.path = f.path "
        "JOIN files b ON b.release = '0.5.23' AND b.path = f.path AND b.sha256 = a.sha256 "
        "JOIN files c ON c.release = '0.5.9' AND c.path = f.path AND c.sha256 = a.sha256 "
        "WHERE f.release = '0.5.11' AND f.path LIKE 'sglang/srt/%' "
        "AND f.end_line - f.start_line > 3 AND f.class_name IS NULL LIMIT 1"
    )
    assert rows, "no file is identical in all three releases"
    path, start, _, name = rows[0]
    frame = F(path, start + 1, name, line_text(store, "0.5.11", path, start + 1))
    assert frame.source
    res = resolve_release(parse_log(render([frame], exc="RuntimeError: x")), store)
    assert res.method == "fingerprint"
    assert res.release == max(["0.5.9", "0.5.11", "0.5.23"], key=release_sort_key)
    assert res.confidence <= 0.5
    assert any("equally" in e for e in res.evidence)
    hinted = parse_log(render([frame], exc="RuntimeError: x", head="pip install sglang==0.5.11"))
    res2 = resolve_release(hinted, store)
    assert res2.release == "0.5.11" and res2.method == "fingerprint"


def test_hint_contradicted_by_frames(store: Store) -> None:
    text = render(seed_frames(store), head="sglang==0.5.9")
    res = resolve_release(parse_log(text), store)
    assert res.release == "0.5.11"
    assert any("contradict" in e for e in res.evidence)


# ---------------------------------------------------------------------------- nearest


def test_dev_build_shifted_is_nearest_0511(store: Store) -> None:
    frames = shift(seed_frames(store), 79)
    text = render(frames, head="SGLang `0.5.19.dev410+gedff717ef`")
    res = resolve_release(parse_log(text), store)
    assert res.release == "0.5.11"
    assert res.method == "nearest"
    assert res.dev_build is True
    assert res.reported_version == "0.5.19.dev410+gedff717ef"
    assert res.note is not None and "nearest release 0.5.11" in res.note
    assert "dev build 0.5.19.dev410+gedff717ef" in res.note
    assert res.line_offsets[SERVER_ARGS] == 79
    reported = frames[-1].line
    assert reported - res.line_offsets[SERVER_ARGS] == seed_assert(store).start_line
    assert 0.5 <= res.confidence < 0.9


def test_dev_build_uneven_shift_maps_crash_site(store: Store) -> None:
    """Different offsets per frame (code inserted between them); Python 3.11 reports the
    last line of a multi-line assert test, so the printed line is not the ``assert``."""
    chk = seed_assert(store)
    frames = seed_frames(store)[:-1]
    frames = [F(f.path, f.line + 12 * (i + 1), f.function, f.source) for i, f in enumerate(frames)]
    last = chk.test_end
    frames.append(
        F(
            SERVER_ARGS,
            last + 64,
            "_handle_speculative_decoding",
            line_text(store, "0.5.11", SERVER_ARGS, last),
        )
    )
    res = resolve_release(parse_log(render(frames)), store)
    assert res.release == "0.5.11" and res.method == "nearest" and res.dev_build
    assert frames[-1].line - res.line_offsets[SERVER_ARGS] == last
    assert "lines 12-64 off" in (res.note or "")


def test_patched_install_without_version_is_nearest(store: Store) -> None:
    frames = seed_frames(store)
    frames[-1] = F(SERVER_ARGS, frames[-1].line + 5, frames[-1].function, frames[-1].source)
    res = resolve_release(parse_log(render(frames)), store)
    assert res.release == "0.5.11" and res.method == "nearest"
    assert res.line_offsets[SERVER_ARGS] == 5
    assert "patched" in (res.note or "")


# --------------------------------------------------------------------- explicit / hints


def test_explicit_release_wins(store: Store) -> None:
    parsed = parse_log(render(seed_frames(store)))
    res = resolve_release(parsed, store, explicit="0.5.23")
    assert res.release == "0.5.23" and res.method == "explicit" and res.confidence == 1.0
    assert any("0.5.11" in e and "line for line" in e for e in res.evidence)
    res2 = resolve_release(parsed, store, explicit="v0.5.11")
    assert res2.release == "0.5.11" and res2.method == "explicit"
    assert res2.line_offsets == {SERVER_ARGS: 0}


def test_explicit_hint_from_structured_input(store: Store) -> None:
    from service.engine.logparse.parse import parse_input

    parsed, _ = parse_input({"log": "ValueError: something odd", "release": "0.5.9"})
    res = resolve_release(parsed, store)
    assert res.release == "0.5.9" and res.method == "explicit"


def test_explicit_not_ingested_is_reported(store: Store) -> None:
    parsed = parse_log(render(seed_frames(store)))
    res = resolve_release(parsed, store, explicit="0.5.12")
    assert res.method == "fingerprint" and res.release == "0.5.11"
    assert res.reported_version == "0.5.12"
    assert res.note is not None and "0.5.12" in res.note and "not ingested" in res.note


def test_pip_hint_without_frames(store: Store) -> None:
    parsed = parse_log("Successfully installed sglang-0.5.9\nValueError: bad flag combination\n")
    res = resolve_release(parsed, store)
    assert res.release == "0.5.9" and res.method == "hint"
    assert res.confidence >= 0.7


def test_dev_version_without_frames_uses_version_order(store: Store) -> None:
    parsed = parse_log("SGLang version: 0.5.12.dev7+g1234abcd\nValueError: nope\n")
    res = resolve_release(parsed, store)
    assert res.release == "0.5.11" and res.method == "nearest" and res.dev_build
    assert res.confidence < 0.5


def _holders(store: Store, text: str) -> list[str]:
    """Ingested releases with a check whose message source holds ``text``, oldest first."""
    rows = store.query("SELECT DISTINCT release FROM checks WHERE instr(message, ?) > 0", (text,))
    return sorted((r["release"] for r in rows), key=release_sort_key)


def test_message_only_narrows_to_the_releases_holding_it(store: Store) -> None:
    message = "fa3, aiter, triton, or trtllm_mha is required"
    parsed = parse_log(f"AssertionError: {message}\n")
    res = resolve_release(parsed, store)
    holders = _holders(store, message)
    assert res.note is not None and "pip show sglang" in res.note
    assert res.confidence < 0.5
    if holders and len(holders) < len(store.releases()):
        assert res.method == "message" and res.release == holders[-1]
        assert res.range is not None and res.range.releases == holders
    else:
        newest = max((r["version"] for r in store.releases()), key=release_sort_key)
        assert res.method == "none" and res.release == newest


def test_message_held_by_some_releases_picks_the_newest(store: Store) -> None:
    # 0.5.11 reworded this check (it names SM100 and SM120); 0.5.23 moved it into a hook
    text = "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). "
    log = f"ValueError: {text}Please use a different backend.\n"
    holders = _holders(store, text)
    assert "0.5.9" in holders and "0.5.11" not in holders
    res = resolve_release(parse_log(log), store)
    assert res.release == holders[-1] and res.method == "message"
    assert res.range is not None and res.range.releases == holders
    assert 0.25 < res.confidence < 0.5  # the text alone: releases not ingested may hold it too
    assert any("sglang/srt/server_args.py" in e and f"in {holders[-1]}" in e for e in res.evidence)
    assert res.note is not None and "pip show sglang" in res.note
    named = resolve_release(parse_log("SGLang version: 0.5.10\n" + log), store)
    assert named.release == "0.5.9" and named.method == "message"
    assert named.note is not None and "0.5.10, which is not ingested" in named.note


def test_message_every_release_holds_decides_nothing(store: Store) -> None:
    message = "Cannot set --encoder-only and --disaggregation-mode prefill/decode together"
    res = resolve_release(parse_log(f"ValueError: {message}\n"), store)
    holders = _holders(store, message)
    newest = max((r["version"] for r in store.releases()), key=release_sort_key)
    assert res.release == newest and res.confidence <= 0.3
    if len(holders) == len(store.releases()):
        assert res.method == "none"
        assert any("alike in every ingested release" in e for e in res.evidence)
    else:  # an older release lacks it: the range says so, the newest is still taken
        assert res.method == "message" and res.range is not None
        assert res.range.releases == holders


def test_a_release_hint_outweighs_the_message(store: Store) -> None:
    log = (
        "Successfully installed sglang-0.5.23\n"
        "ValueError: TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). "
        "Please use a different backend.\n"
    )
    res = resolve_release(parse_log(log), store)
    assert res.release == "0.5.23" and res.method == "hint"


def _launch_warning(line: int) -> str:
    """The deprecation warning ``python -m sglang.launch_server`` prints (0.5.11 and later)."""
    return (
        f"/sgl-workspace/sglang/python/sglang/launch_server.py:{line}: UserWarning: "
        "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
        "recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]\n"
        "  warnings.warn(\n"
    )


def _warn_line(store: Store, version: str) -> int | None:
    text = store.file_text(version, "sglang/launch_server.py") or ""
    return next(
        (i for i, line in enumerate(text.split("\n"), 1) if line.strip() == "warnings.warn("), None
    )


def test_a_warning_line_picks_the_releases_that_issue_it_there(store: Store) -> None:
    message = (
        "ValueError: Cannot set --encoder-only and --disaggregation-mode prefill/decode together\n"
    )
    versions = sorted((r["version"] for r in store.releases()), key=release_sort_key)
    lines = {v: _warn_line(store, v) for v in versions}
    assert lines["0.5.11"] and lines["0.5.23"] and lines["0.5.9"] is None
    for line in sorted({n for n in lines.values() if n}):
        fit = [v for v in versions if lines[v] == line]
        res = resolve_release(parse_log(_launch_warning(line) + message), store)
        assert res.release == fit[-1] and res.method == "warnings"
        assert res.range is not None and res.range.releases == fit
        assert any(f"launch_server.py:{line} fit " in e and "no other" in e for e in res.evidence)
    # 0.5.9 has no such warning; at a line where no release issues it, the warning decides nothing
    res = resolve_release(parse_log(_launch_warning(3) + message), store)
    assert any("fit no ingested release" in e for e in res.evidence)
    assert res.range is not None and not res.range.evidence[0].used


def test_warnings_outweigh_a_contradicting_hint(store: Store) -> None:
    line = next(
        i
        for i in range(1, 200)
        if line_text(store, "0.5.11", "sglang/launch_server.py", i) == "warnings.warn("
    )
    log = "Successfully installed sglang-0.5.9\n" + _launch_warning(line) + "ValueError: boom\n"
    res = resolve_release(parse_log(log), store)
    assert res.release == "0.5.11" and res.method == "warnings"
    assert any("contradict the release hint" in e for e in res.evidence)


def test_only_release(tmp_path: Path) -> None:
    one = Store(tmp_path / "index.sqlite")
    one.replace_release(
        "0.5.11",
        {"version": "0.5.11", "origin": "test", "content_hash": "h", "status": "indexed"},
        {"files": [("0.5.11", "sglang/x.py", "s", 1, None, pack_text("x = 1\n"))]},
    )
    res = resolve_release(parse_log("ValueError: something\n"), one)
    assert res.release == "0.5.11" and res.method == "only_release" and res.confidence < 0.5
    empty = Store(tmp_path / "empty.sqlite")
    res2 = resolve_release(parse_log("ValueError: something\n"), empty)
    assert res2.release is None and res2.method == "none"


def test_release_sort_key() -> None:
    vs = ["0.5.11", "0.5.9", "0.5.19.dev410+gedff717ef", "0.5.23", "weird", "0.5.11rc1"]
    assert sorted(vs, key=release_sort_key) == [
        "weird",
        "0.5.9",
        "0.5.11rc1",
        "0.5.11",
        "0.5.19.dev410+gedff717ef",
        "0.5.23",
    ]


def test_check_moved_to_another_argument_object(store: Store) -> None:
    """0.5.23 hooks read ``cfg.X`` where older code read ``server_args.X``; a dev build
    printing ``server_args.`` still anchors on the 0.5.23 line (like issue 38236)."""
    for chk in store.checks(
        "0.5.23", where="path LIKE 'sglang/srt/arg_groups/%' AND kind = 'assert'"
    ):
        path = chk.path
        text = line_text(store, "0.5.23", path, chk.start_line)
        if text.startswith("assert cfg."):
            break
    else:
        raise AssertionError("no assert reading cfg. in arg_groups")
    fn = store.function("0.5.23", chk.function, path)
    assert fn is not None
    printed = text.replace("cfg.", "server_args.")
    frame = F(path, chk.start_line + 1, fn["name"], printed)
    res = resolve_release(parse_log(render([frame], exc=f"{chk.exc_type}: x")), store)
    assert res.release == "0.5.23" and res.method == "nearest" and res.dev_build
    assert res.line_offsets == {path: 1}
    assert any("another argument object" in e for e in res.candidates[0].evidence)


def test_frames_without_source_lines(store: Store) -> None:
    path = "sglang/srt/arg_groups/speculative_hook.py"
    chk = store.checks("0.5.23", path=path)[0]
    fn = store.function("0.5.23", chk.function, path)
    assert fn is not None
    text = (
        f'Traceback (most recent call last):\n  File "{SITE}/{path}", line '
        f"{chk.start_line}, in {fn['name']}\nValueError: x\n"
    )
    res = resolve_release(parse_log(text), store)
    assert res.release == "0.5.23" and res.method == "fingerprint"
    assert 0.3 < res.confidence < 0.7
