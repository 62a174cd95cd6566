"""Argparse across engines and parsers: other engines' flags, underscores, aliases, the
diffusion server's own parser, and the shapes an argparse error is pasted in."""

from __future__ import annotations

import shlex

import pytest

from kb.catalog_types import Catalog, FlagSpec
from kb.catalogs import load_catalog
from kb.foreign_flags import foreign_flags
from service.engine.flags.parse import parse_argv
from service.engine.locate.argparse import diagnose_argparse
from service.engine.locate.argparse.words import resolve_spelling
from service.engine.locate.flag_history import releases_with_flags
from service.engine.logparse.argparse_errors import ArgparseError, find_argparse_error

_NOWHERE = "in any ingested release"
BASE = "--model-path /models/m --tp-size 2"


@pytest.fixture(scope="module")
def releases(store) -> list[str]:
    return releases_with_flags(store)


def _err(message: str, *lines: str) -> ArgparseError:
    err = find_argparse_error([*lines, f"launch_server.py: error: {message}"])
    assert err is not None
    return err


def _bare(message: str) -> ArgparseError:
    """An error as the diffusion server prints it: ``error: ...`` with no program name."""
    err = find_argparse_error([f"error: {message}"])
    assert err is not None and err.parser is None
    return err


def _value_for(spec: FlagSpec) -> str:
    """A value the release's parser accepts for ``spec`` (from its own choices and type)."""
    if spec.choices:
        return str(spec.choices[0])
    return {"int": "16", "float": "0.5"}.get(
        spec.type or "", "16" if "int" in (spec.type or "") else "x"
    )


def _clean(argv: list[str], catalog: Catalog) -> dict[str, object]:
    parsed = parse_argv(argv, catalog)
    assert parsed.unknown == [] and parsed.errors == [], (argv, parsed.unknown, parsed.errors)
    return {k: v.value for k, v in parsed.values.items()}


# --------------------------------------------------------------------------- other engines


def test_every_foreign_flag_is_replaced_by_the_releases_own(store, releases) -> None:
    """Each table entry, on each indexed release: the fix parses cleanly with the release's
    parser and sets SGLang's flag, both sides are cited; an entry whose SGLang flag the
    release lacks offers no replacement."""
    offered = 0
    for rel in releases:
        cat = load_catalog(store, rel)
        by_flag = cat.by_flag()
        for e in foreign_flags():
            # SGLang's argparse takes it (an alias or a unique prefix of its option):
            # answered as such below
            if resolve_spelling(e.flag, cat) is not None:
                continue
            target = next((s for s in e.sglang if s in by_flag), None)
            value = (
                [_value_for(by_flag[target])]
                if target and by_flag[target].takes_value and e.value == "same"
                else ["7"]
                if e.value == "same"
                else []
            )
            argv = shlex.split(BASE) + [e.flag, *value]
            d = diagnose_argparse(
                _err(f"unrecognized arguments: {' '.join([e.flag, *value])}"), argv, store, rel
            )
            assert f"{e.engine}'s flag" in d.explanation and e.source in d.explanation
            assert d.foreign_sources == [e.source]
            assert _NOWHERE not in d.explanation.split("\n\n")[0]
            assert d.fixed_argv is not None and e.flag not in d.fixed_argv
            values = _clean(d.fixed_argv, cat)
            if target is None or e.value == "drop":
                assert not any(k.get("set") for k in d.edits), (rel, e.flag)
                continue
            offered += 1
            spec = by_flag[target]
            assert f"{rel}:{spec.path}:{spec.line}" in d.explanation
            assert d.flag_line == (spec.path, spec.line)
            assert spec.attr in values, (rel, e.flag, target)
            if e.value == "same" and spec.takes_value:
                assert str(values[spec.attr]) in value or values[spec.attr] in value
            if e.value == "tp":
                assert values[spec.attr] == values["tp_size"] == 2
    assert offered >= 10 * len(releases)


def test_companions_are_added_unless_the_command_sets_them(store) -> None:
    cat = load_catalog(store, "0.5.23")
    argv = shlex.split(f"{BASE} --speculative-algorithm EAGLE --num-speculative-tokens 3")
    d = diagnose_argparse(
        _err("unrecognized arguments: --num-speculative-tokens 3"), argv, store, "0.5.23"
    )
    got = _clean(d.fixed_argv or [], cat)
    assert (
        got["speculative_num_steps"],
        got["speculative_eagle_topk"],
        got["speculative_num_draft_tokens"],
    ) == (3, 1, 4)
    assert "approximation" in d.explanation
    argv += ["--speculative-num-draft-tokens", "8"]
    d = diagnose_argparse(
        _err("unrecognized arguments: --num-speculative-tokens 3"), argv, store, "0.5.23"
    )
    assert _clean(d.fixed_argv or [], cat)["speculative_num_draft_tokens"] == 8


def test_expert_parallel_without_a_tp_size_asks_for_the_value(store) -> None:
    argv = ["--model-path", "/m", "--enable-expert-parallel"]
    d = diagnose_argparse(
        _err("unrecognized arguments: --enable-expert-parallel"), argv, store, "0.5.23"
    )
    assert d.fixed_argv == ["--model-path", "/m"]
    assert "set --ep-size to the value you need" in d.explanation


# --------------------------------------------------------------------------- spellings


@pytest.mark.parametrize("typed", ["--enable_metrics", "--context_length=4096", "--tp_size 4"])
def test_underscore_spelling_becomes_the_dashed_option(store, releases, typed: str) -> None:
    for rel in releases:
        cat = load_catalog(store, rel)
        assert not any("_" in f for f in cat.by_flag()), rel  # no indexed release takes them
        argv = shlex.split(f"--model-path /m {typed}")
        d = diagnose_argparse(_err(f"unrecognized arguments: {typed}"), argv, store, rel)
        target = typed.split()[0].split("=")[0].replace("_", "-")
        assert d.suggestions[0] == target
        assert "spells its options with dashes only" in d.explanation
        assert f"(SGLang spells it {target})" in d.explanation.split(". ")[0]
        assert _NOWHERE not in d.explanation
        got = _clean(d.fixed_argv or [], cat)
        assert cat.by_flag()[target].attr in got  # the option is set (in its primary spelling)


def test_no_flag_of_any_release_is_said_to_exist_nowhere(store, releases) -> None:
    """Walk every spelling of every indexed release's LLM catalog, each told to the newest
    release's parser as unrecognized: the answer never claims the flag exists in no release,
    and for a spelling the newest release has, it says that parser would accept it (and
    changes nothing)."""
    newest = load_catalog(store, releases[-1]).by_flag()
    union: set[str] = set()
    for rel in releases:
        union.update(load_catalog(store, rel).by_flag())
    for flag in sorted(union):
        d = diagnose_argparse(_err(f"unrecognized arguments: {flag}"), None, store, releases[-1])
        assert _NOWHERE not in d.explanation, flag
        if flag in newest:
            assert "so that parser would accept it" in d.explanation and d.edits == [], flag
            assert d.flag_line == (newest[flag].path, newest[flag].line)
        else:
            assert any(h.flag == flag and h.present_in for h in d.history), flag
    assert len(union) > len(newest) > 300


def test_an_alias_sglang_accepts_is_not_reported_unknown(store, releases) -> None:
    for rel in releases:
        if "--tensor-parallel-size" not in load_catalog(store, rel).by_flag():
            continue
        d = diagnose_argparse(
            _err("unrecognized arguments: --tensor-parallel-size 8"),
            shlex.split("--model-path /m --tensor-parallel-size 8"),
            store,
            rel,
        )
        assert "is an option of SGLang's LLM server" in d.explanation
        assert "vLLM" not in d.explanation and d.fixed_argv is None


# --------------------------------------------------------------------------- diffusion parser


def _diffusion_log(extra: str) -> list[str]:
    return [
        f"$ sglang serve --model-path black-forest-labs/FLUX.1-dev {extra}",
        f"error: unrecognized arguments: {extra.split()[-1]}",
    ]


def _only(cat: Catalog) -> tuple[list[str], list[str]]:
    llm, diff = set(cat.by_flag()), set(cat.diffusion_catalog().by_flag())
    return sorted(diff - llm), sorted(llm - diff)


def test_the_diffusion_parser_is_answered_with_its_own_flags(store, releases) -> None:
    for rel in releases:
        cat = load_catalog(store, rel)
        if not cat.diffusion:  # 0.4.x ships no diffusion server
            continue
        diff_only, llm_only = _only(cat)
        own = diff_only[0]  # a flag only the diffusion server takes
        typo = own[:-1] + ("x" if own[-1] != "x" else "y")
        argv = ["--model-path", "black-forest-labs/FLUX.1-dev", own, "1", typo]
        d = diagnose_argparse(_bare(f"unrecognized arguments: {typo}"), argv, store, rel)
        assert d.parser == "diffusion" and "diffusion server" in d.explanation
        assert d.suggestions and set(d.suggestions) <= set(cat.diffusion_catalog().by_flag())
        # the same typo of an LLM-only flag, told to the LLM parser, proposes LLM flags only
        llm_typo = llm_only[0][:-1] + "q"
        d = diagnose_argparse(
            _bare(f"unrecognized arguments: {llm_typo}"),
            ["--model-path", "/m", llm_typo],
            store,
            rel,
        )
        assert d.parser == "llm" and set(d.suggestions) <= set(cat.by_flag())
        # an LLM-only flag given to the diffusion server: it belongs to the other parser
        d = diagnose_argparse(
            _bare(f"unrecognized arguments: {llm_only[0]}"),
            ["--model-path", "/m", own, "1", llm_only[0]],
            store,
            rel,
        )
        assert "LLM server" in d.explanation and "not of SGLang's diffusion server" in d.explanation
        assert _NOWHERE not in d.explanation


def test_a_diffusion_only_flag_given_to_the_llm_server(store) -> None:
    cat = load_catalog(store, "0.5.23")
    own = _only(cat)[0][0]
    argv = shlex.split(f"{BASE} {own} 1")
    d = diagnose_argparse(
        _err(
            f"unrecognized arguments: {own} 1",
            "$ python -m sglang.launch_server " + shlex.join(argv),
        ),
        argv,
        store,
        "0.5.23",
    )
    assert d.parser == "llm"
    assert "diffusion server" in d.explanation and "not of SGLang's LLM server" in d.explanation
    assert d.fixed_argv is not None and own not in d.fixed_argv


def test_the_log_says_which_parser_ran() -> None:
    diff = find_argparse_error(_diffusion_log("--num-gpus 2 --bogus"))
    assert diff is not None and diff.parser is None  # only the command's flags tell
    traced = find_argparse_error(
        [
            'File "/x/sglang/multimodal_gen/runtime/server_args.py"',
            "error: unrecognized arguments: --bogus",
        ]
    )
    assert traced is not None and traced.parser == "diffusion"
    llm = find_argparse_error(
        [
            "$ python3 -m sglang.launch_server --model-path m --bogus",
            "launch_server.py: error: unrecognized arguments: --bogus",
        ]
    )
    assert llm is not None and llm.parser == "llm"


def test_diffusion_command_end_to_end(kb) -> None:
    from service.engine import Engine

    log = "\n".join(_diffusion_log("--num-gpus 2 --bogus")) + "\n"
    r = Engine(kb).triage(log, release="0.5.23")
    assert r.status == "argparse" and "diffusion server" in r.explanation
    assert r.fixes and r.fixes[0].command.startswith("sglang serve ")
    assert "--bogus" not in r.fixes[0].command and "--num-gpus 2" in r.fixes[0].command
    log = (
        "$ python -m sglang.launch_server --model-path /m --tp-size 2 --gpu-memory-utilization 0.85\n"
        "launch_server.py: error: unrecognized arguments: --gpu-memory-utilization 0.85\n"
    )
    r = Engine(kb).triage(log, release="0.5.23")
    assert r.fixes and "--mem-fraction-static 0.85" in r.fixes[0].command
    assert "vLLM's flag, SGLang's is --mem-fraction-static" in r.summary
    assert "vLLM's flag" in r.explanation and "vllm-project/vllm@" in r.explanation


# --------------------------------------------------------------------------- line shapes


@pytest.mark.parametrize(
    "lines",
    [
        ["    launch_server.py: error: unrecognized arguments: --max-model-len 4096"],
        ["unrecognized arguments: --max-model-len 4096"],
        ["\tsglang: error: unrecognized arguments: --max-model-len 4096"],
        [
            "usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]",
            "                        [--context-length CONTEXT_LENGTH]",
            "launch_server.py: error: unrecognized arguments: --max-model-len 4096",
        ],
        [
            "usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]",
            "...",
            "  launch_server.py: error: unrecognized arguments: --max-model-len 4096",
        ],
        [
            "[2026-12-03 10:00:00] unrelated line",
            "error: unrecognized arguments: --max-model-len 4096",
            "[rank0]: exiting",
        ],
    ],
)
def test_argparse_line_shapes_are_read(lines: list[str]) -> None:
    err = find_argparse_error(lines)
    assert err is not None and err.kind == "unrecognized_arguments"
    assert err.flags == ["--max-model-len"] and err.values == ["4096"]
