"""The rule of a bare check in plain words (service/engine/explain/rule.py): over real checks
of the suite's KB, and unit by unit over condition strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb.catalogs import load_catalog
from kb.code_types import Check
from service.engine import Engine, referenced_names
from service.engine.explain.rule import Namer, rule_sentence, words
from tests.conftest import TEST_RELEASES

SEED_LOG = (Path(__file__).resolve().parents[4] / "examples" / "seed_attempt1.log").read_text()
SPEC_FN = "ServerArgs._handle_speculative_decoding"


def _bare_spec_asserts(store, release: str) -> list[Check]:
    return [
        c
        for c in store.checks(release, path="sglang/srt/server_args.py", function=SPEC_FN)
        if c.kind == "assert" and c.bare
    ]


@pytest.mark.parametrize("release", sorted(TEST_RELEASES))
def test_bare_speculative_asserts_name_every_flag_they_read(store, release: str) -> None:
    checks = _bare_spec_asserts(store, release)
    if release == "0.5.11":
        assert checks, "0.5.11's _handle_speculative_decoding has a bare assert"
    by_attr = load_catalog(store, release).by_attr()
    for check in checks:
        sentence = rule_sentence(check, release, load_catalog(store, release))
        assert sentence is not None and sentence.startswith(f"In {release}, ")
        words_part = sentence.split("; otherwise the assert at ")[0]
        assert "self." not in words_part and "server_args." not in words_part
        read = set(referenced_names(check.condition))
        for g in check.guards:
            read |= set(referenced_names(g["condition"]))
        for attr in read:
            named = f"`{by_attr[attr].flags[0]}`" if attr in by_attr else f"`{attr}`"
            assert named in sentence, (attr, sentence)
        cite = f"{release}:{check.path}:{check.start_line}"
        assert f"`{cite}`" in sentence
        assert store.file_lines(release, check.path, check.start_line, check.start_line)


def test_the_0_5_11_speculative_rule_reads_as_its_condition(store) -> None:
    check = next(
        c
        for c in _bare_spec_asserts(store, "0.5.11")
        if "speculative_eagle_topk is None" in c.condition
    )
    sentence = rule_sentence(check, "0.5.11", load_catalog(store, "0.5.11"))
    assert sentence is not None
    assert "`--speculative-algorithm` is one of EAGLE, EAGLE3 or STANDALONE" in sentence
    assert (
        "either `--speculative-algorithm` is not STANDALONE or `--enable-dp-attention` is not "
        "set" in sentence
    )  # the early exit, negated with De Morgan
    assert (
        "`--speculative-num-steps` is not set, then `--speculative-eagle-topk` and "
        "`--speculative-num-draft-tokens` must both be unset" in sentence
    )


def test_the_users_spelling_is_used(store) -> None:
    check = next(
        c
        for c in store.checks("0.5.11", path="sglang/srt/server_args.py")
        if c.bare and (c.condition or "").strip() == "self.tp_size % self.dp_size == 0"
    )
    sentence = rule_sentence(
        check,
        "0.5.11",
        load_catalog(store, "0.5.11"),
        spellings={"tp_size": "--tp", "dp_size": "--dp"},
    )
    assert sentence is not None
    assert "when `--enable-dp-attention` is set, `--tp` must be divisible by `--dp`;" in sentence


def test_the_engine_fills_the_rule_and_explains_it(kb) -> None:
    result = Engine(kb).triage(SEED_LOG, release="0.5.11")
    assert result.location is not None and result.rule is not None
    assert f"`{result.location.citation}`" in result.rule
    assert "`--speculative-eagle-topk`" in result.rule and "self." not in result.rule
    assert f"**The rule:** {result.rule}" in result.explanation


# ----------------------------------------------------------------------------- units

NAMES = Namer(
    spellings={
        a: "--" + a.replace("_", "-") for a in ("a", "b", "x", "tp", "dp", "n", "alg", "model_path")
    }
)


@pytest.mark.parametrize(
    "condition, require, negate, expected",
    [
        ("self.x is None", False, False, "`--x` is not set"),
        ("self.x is not None", False, False, "`--x` is set"),
        ("self.x is None", True, False, "`--x` must be unset"),
        ("self.a is None and self.b is None", True, False, "`--a` and `--b` must both be unset"),
        ("self.tp % self.dp == 0", True, False, "`--tp` must be divisible by `--dp`"),
        ("self.n <= 8", True, False, "`--n` must be at most 8"),
        ("8 >= self.n", True, False, "`--n` must be at most 8"),
        ("self.n > 1", False, True, "`--n` is at most 1"),
        ("self.n != 3", True, False, "`--n` must not be 3"),
        ("self.alg in ('EAGLE', 'EAGLE3')", False, False, "`--alg` is one of EAGLE or EAGLE3"),
        ("self.alg not in ['A', 'B', 'C']", True, False, "`--alg` must not be one of A, B or C"),
        (
            "self.alg == 'STANDALONE' and self.x",
            False,
            True,
            "either `--alg` is not STANDALONE or `--x` is not set",
        ),
        ("not self.x", True, False, "`--x` must not be set"),
        ("self.a or self.b", True, False, "either `--a` or `--b` must be set"),
        ("model_arch in ['A', 'B']", False, False, "the model architecture is one of A or B"),
        ("'Step' in model_arch", False, False, "the model architecture contains Step"),
        ("envs.SGLANG_X.get()", False, False, "the environment variable `SGLANG_X` is true"),
        (
            "model_config.hf_config.mlp_hidden_act == 'relu2'",
            True,
            False,
            "the model config's `mlp_hidden_act` must be relu2",
        ),
        ("len(self.x) == 2", True, False, "the number of values in `--x` must be 2"),
        (
            "parse_connector_type(self.model_path) == ConnectorType.INSTANCE",
            False,
            False,
            "`parse_connector_type(--model-path)` is `ConnectorType.INSTANCE`",
        ),
        ("self.x ==", False, False, "`--x ==`"),  # unparsable: shown as it is, the flag named
    ],
)
def test_words(condition: str, require: bool, negate: bool, expected: str) -> None:
    assert words(condition, NAMES, require=require, negate=negate) == expected


def test_a_long_list_is_shortened_with_its_length() -> None:
    text = words("self.alg in ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i']", NAMES)
    assert text == "`--alg` is one of a, b, c, d … (9 values)"


def test_self_outside_server_args_is_not_a_flag() -> None:
    check = Check.from_row(
        {
            "kind": "assert",
            "condition": "self.tp > 1",
            "guards": [],
            "path": "sglang/srt/m.py",
            "function": "ModelRunner.load",
            "start_line": 7,
            "exc_type": None,
        }
    )
    assert rule_sentence(check, "0.5.11", spellings={"tp": "--tp"}) == (
        "In 0.5.11, `self.tp` must be more than 1; otherwise the assert at "
        "`0.5.11:sglang/srt/m.py:7` fails."
    )


def test_a_bare_raise_is_its_guards() -> None:
    check = Check.from_row(
        {
            "kind": "raise",
            "condition": None,
            "exc_type": "ValueError",
            "path": "p.py",
            "function": "ServerArgs.f",
            "start_line": 3,
            "guards": [
                {"condition": "self.x", "polarity": True},
                {"condition": "self.n > 2", "polarity": False},
            ],
        }
    )
    assert rule_sentence(check, "0.5.11", spellings={"x": "--x", "n": "--n"}) == (
        "In 0.5.11, the server refuses to start (ValueError at `0.5.11:p.py:3`) when `--x` is "
        "set and `--n` is at most 2."
    )
