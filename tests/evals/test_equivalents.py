"""Equivalent answers of frameless logs: the record, the in-place update, and the scorer."""

from __future__ import annotations

import json
from pathlib import Path

from evals.equivalents import normalize, update_file
from evals.incidents import Equivalent, Expected, ExpectedLocation, Incident, load_incidents
from evals.scoring import Prediction, score

_LOG = "$ python -m sglang.launch_server --model-path m --enable-x\nValueError: x needs   y\n"


def _incident(**expected: object) -> Incident:
    """A made-up frameless incident: 0.5.16's check in server_args.py, and 0.5.23's hook."""
    return Incident(
        id="made-up-1",
        source="test",
        release="0.5.16",
        hardware="h100-x8",
        command=["--model-path", "m", "--enable-x"],
        crash_log=_LOG,
        category="other",
        expected=Expected(
            release="0.5.16",
            location=ExpectedLocation(
                path="sglang/srt/server_args.py",
                function="ServerArgs._handle_x",
                start_line=100,
                end_line=104,
            ),
            equivalents=[
                Equivalent(
                    release="0.5.23",
                    path="sglang/srt/arg_groups/x_hook.py",
                    function="_check_x",
                    start_line=40,
                    end_line=44,
                )
            ],
            **expected,
        ),
    )


def _answer(release: str, path: str, function: str, start: int, end: int) -> Prediction:
    return Prediction(
        status="located",
        release=release,
        location={"path": path, "function": function, "start_line": start, "end_line": end},
    )


def _located(metrics: dict) -> tuple:
    return metrics["release_at_1"], metrics["exact_location"], metrics["function_match"]


def test_scorer_accepts_the_primary_and_an_equivalent() -> None:
    inc = _incident()
    primary = _answer("0.5.16", "sglang/srt/server_args.py", "ServerArgs._handle_x", 100, 104)
    assert _located(score(inc, primary, None)) == (True, True, True)
    hook = _answer("0.5.23", "sglang/srt/arg_groups/x_hook.py", "_check_x", 40, 44)
    assert _located(score(inc, hook, None)) == (True, True, True)


def test_scorer_rejects_a_release_that_is_not_equivalent() -> None:
    inc = _incident()
    # 0.5.21 has the same hook file, but replay did not confirm it prints the same log
    other = _answer("0.5.21", "sglang/srt/arg_groups/x_hook.py", "_check_x", 40, 44)
    assert _located(score(inc, other, None)) == (False, False, False)
    # the equivalent's release with another check, or the primary's lines in it
    wrong_lines = _answer("0.5.23", "sglang/srt/arg_groups/x_hook.py", "_check_x", 41, 44)
    assert _located(score(inc, wrong_lines, None)) == (True, False, True)
    mixed = _answer("0.5.23", "sglang/srt/server_args.py", "ServerArgs._handle_x", 100, 104)
    assert _located(score(inc, mixed, None))[1] is False
    # without equivalents, the hook answer is wrong
    bare = inc.model_copy(update={"expected": inc.expected.model_copy(update={"equivalents": []})})
    hook = _answer("0.5.23", "sglang/srt/arg_groups/x_hook.py", "_check_x", 40, 44)
    assert _located(score(bare, hook, None)) == (False, False, False)


def test_equivalents_are_written_only_when_present() -> None:
    inc = _incident()
    assert inc.model_dump(mode="json")["expected"]["equivalents"][0]["release"] == "0.5.23"
    bare = inc.expected.model_copy(update={"equivalents": []})
    assert "equivalents" not in bare.model_dump(mode="json")
    assert list(inc.model_dump(mode="json")["expected"])[-1] == "equivalents"


def test_update_file_changes_only_the_equivalents(tmp_path: Path) -> None:
    bare = _incident().model_copy(
        update={"expected": _incident().expected.model_copy(update={"equivalents": []})}
    )
    other = bare.model_copy(update={"id": "made-up-2"})
    path = tmp_path / "x.jsonl"
    lines = [json.dumps(i.model_dump(mode="json"), ensure_ascii=False) for i in (bare, other)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    eq = Equivalent(release="0.5.23", path="p.py", function="f", start_line=1, end_line=2)
    assert update_file(path, {"made-up-1": [eq]}) == 1
    new = path.read_text(encoding="utf-8").split("\n")
    assert new[1] == lines[1] and new[2] == ""  # untouched line and final newline kept
    first = json.loads(new[0])
    assert first["expected"].pop("equivalents") == [eq.model_dump()]
    assert json.dumps(first, ensure_ascii=False) == lines[0]  # the rest, order included
    assert load_incidents([path])[0].expected.equivalents == [eq]
    assert update_file(path, {}) == 0  # recomputed: none found, the key goes
    assert path.read_text(encoding="utf-8") == "\n".join(lines) + "\n"


def test_messages_compare_with_whitespace_normalized() -> None:
    assert normalize("x needs   y\n") == normalize(" x needs\ny") == "x needs y"
    assert normalize("x needs y.") != normalize("x needs y")
