"""Explaining argparse errors with the flag catalogs of real releases in the KB."""

from __future__ import annotations

import shlex

import pytest
from packaging.version import Version

from kb.catalogs import load_catalog
from service.engine.flags.parse import parse_argv
from service.engine.locate.argparse import diagnose_argparse
from service.engine.locate.flag_history import flag_history
from service.engine.logparse.argparse_errors import ArgparseError, find_argparse_error


@pytest.fixture(scope="module")
def store(kb):
    return kb.store


def _err(message: str) -> ArgparseError:
    err = find_argparse_error([f"launch_server.py: error: {message}"])
    assert err is not None
    return err


def _argparse_error(argv: list[str], store, release: str) -> ArgparseError:
    """The error the release's parser reports for ``argv``: like argparse, parsing errors
    first, unrecognized arguments only after a clean parse."""
    parsed = parse_argv(argv, load_catalog(store, release))
    if parsed.errors:
        return _err(parsed.errors[0])
    assert parsed.unknown, f"{argv} parses cleanly on {release}"
    return _err("unrecognized arguments: " + " ".join(parsed.unknown))


def _clean(argv: list[str], store, release: str, attr: str) -> object:
    """Parse the fixed argv again: nothing unknown, no error, and the value of ``attr``."""
    parsed = parse_argv(argv, load_catalog(store, release))
    assert parsed.unknown == [] and parsed.errors == []
    return parsed.values[attr].value


def _spellings(store, release: str) -> dict[str, str]:
    rows = store.query("SELECT spelling, attr FROM flag_spellings WHERE release = ?", (release,))
    return {r["spelling"]: r["attr"] for r in rows}


def test_underscore_flag_is_renamed_keeping_the_value(store) -> None:
    argv = shlex.split("--model-path /m --reasoning_parser kimi_k2 --tp 8")
    d = diagnose_argparse(
        _err("unrecognized arguments: --reasoning_parser kimi_k2"), argv, store, "0.5.23"
    )
    assert d.kind == "unrecognized_arguments"
    assert (d.flag, d.value) == ("--reasoning_parser", "kimi_k2")
    assert d.suggestions[0] == "--reasoning-parser"
    assert d.edits == [{"remove": ["--reasoning_parser"], "set": {"--reasoning-parser": "kimi_k2"}}]
    assert d.fixed_argv is not None and "--reasoning_parser" not in d.fixed_argv
    assert _clean(d.fixed_argv, store, "0.5.23", "reasoning_parser") == "kimi_k2"
    spec = load_catalog(store, "0.5.23").by_flag()["--reasoning-parser"]
    assert d.flag_line == (spec.path, spec.line)
    assert "--reasoning-parser" in d.explanation


def test_without_argv_there_is_no_fixed_command(store) -> None:
    d = diagnose_argparse(
        _err("unrecognized arguments: --reasoning_parser kimi_k2"), None, store, "0.5.11"
    )
    assert d.edits and d.fixed_argv is None


def test_switch_with_a_value(store) -> None:
    argv = shlex.split("--model-path /m --trust_remote_code true")
    d = diagnose_argparse(_argparse_error(argv, store, "0.5.23"), argv, store, "0.5.23")
    assert d.edits == [{"remove": ["--trust_remote_code"], "set": {"--trust-remote-code": True}}]
    assert d.fixed_argv == ["--model-path", "/m", "--trust-remote-code"]
    # the correct spelling given a value: the value is a stray token
    argv = shlex.split("--model-path /m --trust-remote-code true --tp 2")
    d = diagnose_argparse(_argparse_error(argv, store, "0.5.23"), argv, store, "0.5.23")
    assert d.edits == [{"drop": ["true"]}]
    assert "takes no value" in d.explanation
    assert d.fixed_argv == ["--model-path", "/m", "--trust-remote-code", "--tp", "2"]


def test_similar_flag_of_another_option_is_not_renamed(store) -> None:
    # --attn-dp-size is a real 0.5.23 flag; 0.5.11 has --attn-cp-size, a different option
    argv = shlex.split("--model-path /m --attn-dp-size 2")
    d = diagnose_argparse(_err("unrecognized arguments: --attn-dp-size 2"), argv, store, "0.5.11")
    assert not any("set" in e for e in d.edits)
    assert d.edits == [{"remove": ["--attn-dp-size"]}]


def test_invalid_choice(store) -> None:
    release = "0.5.23"
    spec = load_catalog(store, release).by_flag()["--attention-backend"]
    assert spec.choices and "flashinfer" in spec.choices
    argv = shlex.split("--model-path /m --attention-backend flashinfr")
    err = _argparse_error(argv, store, release)
    assert err.kind == "invalid_choice"
    d = diagnose_argparse(err, argv, store, release)
    assert d.valid_choices == spec.choices
    assert d.closest_choices[0] == "flashinfer"
    assert d.edits == [{"set": {"--attention-backend": "flashinfer"}}]
    assert d.flag_line == (spec.path, spec.line)
    assert _clean(d.fixed_argv or [], store, release, "attention_backend") == "flashinfer"


def test_invalid_choice_valid_in_another_release(store) -> None:
    cats = {
        v: load_catalog(store, v).by_attr().get("attention_backend") for v in ("0.5.11", "0.5.23")
    }
    old, new = (set(map(str, c.choices or [])) for c in cats.values())
    extra = sorted(new - old)
    if not extra:
        pytest.skip("no attention backend added between 0.5.11 and 0.5.23")
    value = extra[0]
    d = diagnose_argparse(
        _err(
            f"argument --attention-backend: invalid choice: '{value}' (choose from 'fa3', 'triton')"
        ),
        None,
        store,
        "0.5.11",
    )
    assert d.valid_choices == cats["0.5.11"].choices
    assert "0.5.23" in d.explanation


def test_invalid_int_value(store) -> None:
    argv = shlex.split("--model-path /m --tp-size 8.0")
    err = _argparse_error(argv, store, "0.5.23")
    assert err.kind == "invalid_value"
    d = diagnose_argparse(err, argv, store, "0.5.23")
    assert "type int" in d.explanation and d.value == "8.0"
    assert d.edits == [{"set": {"--tp-size": 8}}]
    assert _clean(d.fixed_argv or [], store, "0.5.23", "tp_size") == 8
    d = diagnose_argparse(
        _err("argument --tp-size/--tp: invalid int value: 'eight'"),
        shlex.split("--model-path /m --tp eight"),
        store,
        "0.5.23",
    )
    assert "type int" in d.explanation and d.edits == [] and d.fixed_argv is None


def test_required_flag(store) -> None:
    argv = ["--tp-size", "2"]
    err = _argparse_error(argv, store, "0.5.23")
    assert err.kind == "required"
    d = diagnose_argparse(err, argv, store, "0.5.23")
    spec = load_catalog(store, "0.5.23").by_flag()["--model-path"]
    assert d.flag == "--model-path" and d.flag_line == (spec.path, spec.line)
    assert "--model-path is required" in d.explanation
    assert d.fixed_argv is None


def test_expected_one_argument(store) -> None:
    argv = shlex.split("--model-path /m --chat-template -odd-name.jinja")
    err = _argparse_error(argv, store, "0.5.23")
    assert err.kind == "expected_argument" and err.flags[0] == "--chat-template"
    d = diagnose_argparse(err, argv, store, "0.5.23")
    assert (
        "expects one value" in d.explanation and "--chat-template=-odd-name.jinja" in d.explanation
    )
    assert d.fixed_argv == ["--model-path", "/m", "--chat-template=-odd-name.jinja"]
    assert _clean(d.fixed_argv, store, "0.5.23", "chat_template") == "-odd-name.jinja"
    d = diagnose_argparse(err, ["--model-path", "/m", "--chat-template"], store, "0.5.23")
    assert "last token" in d.explanation and d.fixed_argv is None


def test_ambiguous_prefix(store) -> None:
    release = "0.5.23"
    spellings = list(load_catalog(store, release).by_flag())
    prefix = "--cuda-graph-bs"
    cands = sorted(f for f in spellings if f.startswith(prefix))
    if len(cands) < 2:
        pytest.skip(f"{prefix} is not ambiguous in {release}")
    argv = [*shlex.split("--model-path /m"), prefix, "1", "2"]
    err = _argparse_error(argv, store, release)
    assert err.kind == "ambiguous"
    d = diagnose_argparse(err, argv, store, release)
    assert sorted(d.suggestions) == cands
    assert all(c in d.explanation for c in cands)
    assert d.edits == []


def _added_and_removed(store) -> tuple[str, str | None]:
    s9, s11, s23 = (_spellings(store, v) for v in ("0.5.9", "0.5.11", "0.5.23"))
    added = sorted(f for f in set(s23) - set(s11) if s23[f] not in s11.values())
    removed = sorted(f for f in set(s9) - set(s23) if s9[f] not in s23.values())
    assert added
    return added[0], removed[0] if removed else None


def test_history_of_a_flag_added_later(store) -> None:
    flag, _ = _added_and_removed(store)
    hist = flag_history(store, flag, "0.5.11")
    assert "0.5.23" in hist.present_in and "0.5.11" in hist.absent_in
    first = hist.present_in[0]
    assert hist.note is not None and "added after" in hist.note
    assert f"{flag} exists in" in hist.note and "0.5.23" in hist.note
    added = next(c for c in hist.changes if c.kind == "added")
    assert added.release == first and f"`{flag}` was added in {first}" in hist.note
    assert added.citation is not None and added.citation.startswith(f"{first}:")
    d = diagnose_argparse(_err(f"unrecognized arguments: {flag}"), None, store, "0.5.11")
    assert any(h.flag == flag and h.note == hist.note for h in d.history)
    assert hist.note in d.explanation


def test_history_of_a_flag_removed_later(store) -> None:
    _, flag = _added_and_removed(store)
    if flag is None:
        pytest.skip("no flag of 0.5.9 is gone from 0.5.23")
    hist = flag_history(store, flag, "0.5.23")
    assert "0.5.9" in hist.present_in and "0.5.23" in hist.absent_in
    assert hist.note is not None and "removed after" in hist.note
    argv = ["--model-path", "/m", flag]
    d = diagnose_argparse(_err(f"unrecognized arguments: {flag}"), argv, store, "0.5.23")
    assert d.history[0].note == hist.note
    assert d.edits == [{"remove": [flag]}]
    assert d.fixed_argv == ["--model-path", "/m"]


def test_history_detects_a_renamed_flag(store) -> None:
    old, new = _spellings(store, "0.5.11"), _spellings(store, "0.5.23")
    by_attr = {}
    for spelling, attr in new.items():
        by_attr.setdefault(attr, spelling)
    renamed = sorted(
        f for f in set(old) - set(new) if old[f] in by_attr and not f.startswith("--no-")
    )
    if not renamed:
        pytest.skip("no flag of 0.5.11 renamed by 0.5.23")
    flag = renamed[0]
    cat = load_catalog(store, "0.5.23")
    spec = cat.by_attr()[old[flag]]
    hist = flag_history(store, flag, "0.5.23")
    assert hist.renamed_to in spec.flags
    assert hist.note is not None and "spelled" in hist.note
    value = [] if not spec.takes_value else ["1"]
    argv = ["--model-path", "/m", flag, *value]
    d = diagnose_argparse(
        _err("unrecognized arguments: " + " ".join([flag, *value])), argv, store, "0.5.23"
    )
    assert d.edits and d.edits[0]["set"] and hist.renamed_to in d.edits[0]["set"]
    assert d.fixed_argv is not None
    parsed = parse_argv(d.fixed_argv, cat)
    assert parsed.unknown == [] and spec.attr in parsed.values


def test_history_lists_releases_in_version_order(store) -> None:
    hist = flag_history(store, "--model-path", "0.5.23")
    assert hist.present_in == sorted(hist.present_in, key=Version)
    assert hist.absent_in == [] and hist.note is None
    assert flag_history(store, "--no-such-flag-anywhere", "0.5.23").note is not None
