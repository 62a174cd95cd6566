"""Parsing a user's argv with a release's static flag catalog (argparse semantics)."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.catalog import extract_catalog
from kb.catalog_types import Catalog, FlagSpec
from service.engine.flags.edit import apply_edits, render_command
from service.engine.flags.parse import parse_argv, suggest_flag

SEED = shlex.split(
    "--model-path /models/Kimi-K2.6 --tp 8 --trust-remote-code --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path /d --speculative-eagle-topk 4 --speculative-num-draft-tokens 8"
)


@pytest.fixture(scope="module")
def cat_0511(sglang_source) -> Catalog:
    return extract_catalog(sglang_source("0.5.11").package_dir)


@pytest.fixture(scope="module")
def cat_0523(sglang_source) -> Catalog:
    return extract_catalog(sglang_source("0.5.23").package_dir)


def _spec(attr: str, *flags: str, **kw) -> FlagSpec:
    base = dict(
        type=None,
        action=None,
        nargs=None,
        default=None,
        default_known=True,
        default_src=None,
        choices=None,
        choices_src=None,
        help=None,
        required=False,
        deprecated=False,
        path="sglang/srt/server_args.py",
        line=1,
        layout="argparse",
    )
    base.update(kw)
    return FlagSpec(attr=attr, flags=list(flags), **base)  # type: ignore[arg-type]


@pytest.fixture()
def tiny() -> Catalog:
    return Catalog(
        flags=[
            _spec("count", "--count", type="int"),
            _spec("ratio", "--ratio", type="float"),
            _spec("name", "--name", type="str", choices=["a", "b"]),
            _spec("items", "--items", nargs="+", type="int"),
            _spec("maybe", "--maybe", nargs="*"),
            _spec("pair", "--pair", nargs="2"),
            _spec("opt", "--opt", nargs="?", const="C"),
            _spec("tags", "--tag", action="append", default=["base"]),
            _spec("verbose", "--verbose", action="count"),
            _spec("on", "--on", action="store_true", default=False),
            _spec("off", "--off", action="store_false", default=True),
            _spec("fuse", "--fuse", "--no-fuse", action="BooleanOptionalAction"),
            _spec("flagb", "--flagb", type="bool"),
            _spec("custom", "--custom", type="json_list_type"),
            _spec("count2", "--counter-two", type="int"),
        ],
        declarations=[],
    )


# ---------------------------------------------------------------------------
# real release
# ---------------------------------------------------------------------------


def test_seed_command_0511(cat_0511: Catalog) -> None:
    parsed = parse_argv(SEED, cat_0511)
    assert parsed.errors == [] and parsed.unknown == []
    v = parsed.values
    assert v["model_path"].value == "/models/Kimi-K2.6"
    assert v["tp_size"].value == 8
    assert v["tp_size"].token == "--tp" and v["tp_size"].flag == "--tp-size"
    assert v["tp_size"].raw == ["--tp", "8"] and v["tp_size"].index == 2
    assert parsed.abbreviations == {"--tp": "--tp-size"}
    assert v["trust_remote_code"].value is True and v["trust_remote_code"].raw == [
        "--trust-remote-code"
    ]
    assert v["speculative_algorithm"].value == "EAGLE3"
    assert v["speculative_eagle_topk"].value == 4
    assert isinstance(v["speculative_eagle_topk"].value, int)
    assert v["speculative_num_draft_tokens"].value == 8
    assert v["speculative_draft_model_path"].index == 7


def test_seed_command_0523(cat_0523: Catalog) -> None:
    parsed = parse_argv(SEED, cat_0523)
    assert parsed.errors == [] and parsed.unknown == []
    assert parsed.values["tp_size"].value == 8
    assert parsed.values["speculative_eagle_topk"].value == 4


def test_underscore_flag_unknown_and_suggested(cat_0511: Catalog) -> None:
    parsed = parse_argv(["--model-path", "m", "--reasoning_parser", "kimi_k2"], cat_0511)
    assert parsed.unknown == ["--reasoning_parser", "kimi_k2"]
    assert "reasoning_parser" not in parsed.values
    assert parsed.errors == []
    assert suggest_flag("--reasoning_parser", cat_0511)[0] == "--reasoning-parser"
    assert suggest_flag("reasoning_parser", cat_0511)[0] == "--reasoning-parser"
    assert suggest_flag("--speculative-eagle-top-k", cat_0511)[0] == "--speculative-eagle-topk"
    assert len(suggest_flag("--enable-dp-attn", cat_0511, n=2)) <= 2


def test_invalid_choice(cat_0511: Catalog) -> None:
    parsed = parse_argv(["--model-path", "m", "--attention-backend", "fa9"], cat_0511)
    assert len(parsed.errors) == 1
    err = parsed.errors[0]
    assert err.startswith("argument --attention-backend: invalid choice: 'fa9' (choose from ")
    assert "'fa3'" in err and "'trtllm_mha'" in err
    ok = parse_argv(["--model-path", "m", "--attention-backend", "fa3"], cat_0511)
    assert ok.errors == [] and ok.values["attention_backend"].value == "fa3"


def test_reasoning_parser_choice(cat_0511: Catalog) -> None:
    ok = parse_argv(["--model-path", "m", "--reasoning-parser", "kimi_k2"], cat_0511)
    assert ok.errors == []
    bad = parse_argv(["--model-path", "m", "--reasoning-parser", "kimi_k9"], cat_0511)
    assert bad.errors and "invalid choice: 'kimi_k9'" in bad.errors[0]


def test_abbreviation(cat_0511: Catalog) -> None:
    parsed = parse_argv(["--model-path", "m", "--speculative-eagle-top", "4"], cat_0511)
    assert parsed.errors == []
    assert parsed.abbreviations == {"--speculative-eagle-top": "--speculative-eagle-topk"}
    flag = parsed.values["speculative_eagle_topk"]
    assert flag.value == 4 and flag.token == "--speculative-eagle-top"
    # with =value too
    eq = parse_argv(["--model-path=m", "--speculative-eagle-top=2"], cat_0511)
    assert eq.values["speculative_eagle_topk"].value == 2 and eq.errors == []


def test_ambiguous_abbreviation(cat_0511: Catalog) -> None:
    parsed = parse_argv(["--model-path", "m", "--speculative", "4"], cat_0511)
    assert parsed.errors and parsed.errors[0].startswith(
        "ambiguous option: --speculative could match --speculative-algorithm, "
    )
    assert parsed.unknown == ["--speculative", "4"]


def test_invalid_int_and_missing_value(cat_0511: Catalog) -> None:
    parsed = parse_argv(["--model-path", "m", "--tp-size", "eight", "--port"], cat_0511)
    assert "argument --tensor-parallel-size/--tp-size: invalid int value: 'eight'" in parsed.errors
    assert "argument --port: expected one argument" in parsed.errors


def test_required_missing(cat_0511: Catalog) -> None:
    parsed = parse_argv(["--tp", "2"], cat_0511)
    assert parsed.errors == ["the following arguments are required: --model-path/--model"]
    assert parse_argv(["--model", "x"], cat_0511).errors == []


def test_deprecated_and_boolean_optional(cat_0511: Catalog, cat_0523: Catalog) -> None:
    parsed = parse_argv(
        ["--model-path", "m", "--stream-output", "--no-lora-strict-loading"], cat_0511
    )
    assert parsed.errors == []
    assert parsed.values["incremental_streaming_output"].value is True
    assert parsed.values["lora_strict_loading"].value is False
    new = parse_argv(["--model-path", "m", "--enable-dp-attention", "--dp-size", "2"], cat_0523)
    assert new.errors == [] and new.values["enable_dp_attention"].value is True
    assert new.values["dp_size"].value == 2
    # a retired valued flag: nargs=None + choices, stores const_value
    mono = parse_argv(["--model-path", "m", "--monokernel-backend", "amd"], cat_0523)
    assert mono.errors == [] and mono.values["enable_amd_monokernel"].value is True
    bad = parse_argv(["--model-path", "m", "--monokernel-backend", "nv"], cat_0523)
    assert bad.errors and "invalid choice: 'nv'" in bad.errors[0]


def test_nargs_star_on_real_flag(cat_0511: Catalog) -> None:
    parsed = parse_argv(["--model-path", "m", "--lora-paths", "a", "b=c", "--tp", "2"], cat_0511)
    assert parsed.values["lora_paths"].value == ["a", "b=c"]
    assert parsed.values["lora_paths"].raw == ["--lora-paths", "a", "b=c"]
    assert parsed.values["tp_size"].value == 2


# ---------------------------------------------------------------------------
# argparse mechanics on a tiny catalog
# ---------------------------------------------------------------------------


def test_equals_negative_and_later_wins(tiny: Catalog) -> None:
    parsed = parse_argv(["--count", "-3", "--ratio=-0.5", "--count=7"], tiny)
    assert parsed.errors == [] and parsed.unknown == []
    assert parsed.values["count"].value == 7
    assert parsed.values["count"].raw == ["--count=7"] and parsed.values["count"].index == 3
    assert parsed.values["ratio"].value == -0.5


def test_nargs_patterns(tiny: Catalog) -> None:
    parsed = parse_argv(
        ["--items", "1", "-2", "3", "--maybe", "--pair", "x", "y", "--opt", "--name", "a"], tiny
    )
    assert parsed.errors == []
    assert parsed.values["items"].value == [1, -2, 3]
    assert parsed.values["maybe"].value == []
    assert parsed.values["pair"].value == ["x", "y"]
    assert parsed.values["opt"].value == "C"
    assert parsed.values["name"].value == "a"
    errs = parse_argv(["--items", "--pair", "x", "--name"], tiny).errors
    assert "argument --items: expected at least one argument" in errs
    assert "argument --pair: expected 2 arguments" in errs
    assert "argument --name: expected one argument" in errs
    # nargs + stops at an unknown long option too (it looks like an option)
    stop = parse_argv(["--items", "1", "--bogus", "2"], tiny)
    assert stop.values["items"].value == [1]
    assert stop.unknown == ["--bogus", "2"]


def test_actions(tiny: Catalog) -> None:
    parsed = parse_argv(
        ["--tag", "x", "--tag", "y", "--verbose", "--verbose", "--on", "--off", "--no-fuse"], tiny
    )
    assert parsed.errors == []
    assert parsed.values["tags"].value == ["base", "x", "y"]  # argparse appends to the default
    assert parsed.values["verbose"].value == 2
    assert parsed.values["on"].value is True
    assert parsed.values["off"].value is False
    assert parsed.values["fuse"].value is False
    assert parse_argv(["--fuse"], tiny).values["fuse"].value is True
    assert parse_argv(["--flagb", "False"], tiny).values["flagb"].value is True  # type=bool!
    assert parse_argv(["--custom", "[1]"], tiny).values["custom"].value == "[1]"
    err = parse_argv(["--on=1"], tiny).errors
    assert err == ["argument --on: ignored explicit argument '1'"]


def test_unknown_tokens_and_double_dash(tiny: Catalog) -> None:
    parsed = parse_argv(["stray", "--count", "1", "2", "-x", "--", "--count", "3"], tiny)
    assert parsed.values["count"].value == 1
    assert parsed.unknown == ["stray", "2", "-x", "--", "--count", "3"]
    assert parse_argv(["--name", "c"], tiny).errors == [
        "argument --name: invalid choice: 'c' (choose from 'a', 'b')"
    ]


def test_abbreviation_tiny(tiny: Catalog) -> None:
    parsed = parse_argv(["--rat", "2", "--counter", "5"], tiny)
    assert parsed.abbreviations == {"--rat": "--ratio", "--counter": "--counter-two"}
    assert parsed.values["count2"].value == 5
    amb = parse_argv(["--co", "1"], tiny)
    assert amb.errors == ["ambiguous option: --co could match --count, --counter-two"]


def test_suggest_flag(tiny: Catalog) -> None:
    assert suggest_flag("--Counter_Two", tiny)[0] == "--counter-two"
    assert suggest_flag("--ratoi", tiny)[0] == "--ratio"
    assert suggest_flag("--zzzzzz", tiny) == []


# ---------------------------------------------------------------------------
# rendering and edits
# ---------------------------------------------------------------------------


def test_render_command() -> None:
    argv = ["--model-path", "/m/My Model", "--json-model-override-args", '{"a": 1}']
    line = render_command(argv)
    assert line.startswith("python -m sglang.launch_server --model-path '/m/My Model' ")
    assert "\n" not in line
    assert shlex.split(line)[3:] == argv
    assert render_command(["--tp", "2"], prefix="sglang serve") == "sglang serve --tp 2"
    assert render_command([], prefix="") == ""


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=12), max_size=8))
def test_render_round_trip(argv: list[str]) -> None:
    assert shlex.split(render_command(argv, prefix="")) == argv


def test_apply_edits_remove_and_set(cat_0511: Catalog) -> None:
    out = apply_edits(SEED, cat_0511, remove=["--speculative-eagle-topk", "trust_remote_code"])
    assert "--speculative-eagle-topk" not in out and "4" not in out
    assert "--trust-remote-code" not in out
    assert parse_argv(out, cat_0511).errors == []

    out = apply_edits(SEED, cat_0511, set={"tp_size": 4, "--speculative-eagle-topk": 1})
    assert out[:4] == ["--model-path", "/models/Kimi-K2.6", "--tp", "4"]  # in place, user spelling
    assert out[out.index("--speculative-eagle-topk") + 1] == "1"
    assert len(out) == len(SEED)

    out = apply_edits(SEED, cat_0511, set={"attention_backend": "fa3", "enable_dp_attention": True})
    assert out[-3:] == ["--attention-backend", "fa3", "--enable-dp-attention"]
    parsed = parse_argv(out, cat_0511)
    assert parsed.errors == [] and parsed.values["enable_dp_attention"].value is True

    out = apply_edits(SEED, cat_0511, set={"trust_remote_code": False})
    assert "--trust-remote-code" not in out
    back = apply_edits(out, cat_0511, set={"--trust-remote-code": True})
    assert back == [*out, "--trust-remote-code"]
    assert apply_edits(back, cat_0511, set={"trust_remote_code": True}) == back

    # round-trip: remove then set gives an equivalent command
    removed = apply_edits(SEED, cat_0511, remove=["speculative_eagle_topk"])
    restored = apply_edits(removed, cat_0511, set={"speculative_eagle_topk": 4})
    assert {k: v.value for k, v in parse_argv(restored, cat_0511).values.items()} == {
        k: v.value for k, v in parse_argv(SEED, cat_0511).values.items()
    }


def test_apply_edits_unknown_and_forms(cat_0511: Catalog, tiny: Catalog) -> None:
    argv = ["--model-path", "m", "--reasoning_parser", "kimi_k2", "--tp=2"]
    out = apply_edits(
        argv, cat_0511, remove=["--reasoning_parser"], set={"reasoning_parser": "kimi_k2"}
    )
    assert out == ["--model-path", "m", "--tp=2", "--reasoning-parser", "kimi_k2"]
    assert apply_edits(out, cat_0511, set={"tp_size": 8})[2] == "--tp=8"
    assert apply_edits(["--count", "1", "--count", "2"], tiny, set={"count": 3}) == ["--count", "3"]
    assert apply_edits([], tiny, set={"items": [1, 2]}) == ["--items", "1", "2"]
    assert apply_edits(["--items", "1", "--on"], tiny, set={"items": None}) == ["--on"]
    assert apply_edits(["--fuse"], tiny, set={"fuse": False}) == ["--no-fuse"]
    assert apply_edits([], tiny, set={"off": False}) == ["--off"]
    assert apply_edits(["--rat", "1"], tiny, remove=["ratio"]) == []
    with pytest.raises(KeyError):
        apply_edits([], tiny, set={"no_such_flag": 1})
