"""The parent's argv filter reads a command line as the release's argparse does (issue 26)."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import pytest

from service.replay import sandbox
from service.replay.argv_guard import OptionTable, expand
from service.replay.child.guard import dump_options
from service.replay.options import from_dump
from service.replay.plan import substitute_argv


def _parser(required: bool = True) -> argparse.ArgumentParser:
    """A parser shaped like SGLang's (the options that matter, and prefix neighbours)."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path", "--model", dest="model_path", required=required)
    parser.add_argument("--model-impl")
    parser.add_argument("--tokenizer-path")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--tp-size", "--tp", type=int)
    parser.add_argument("--speculative-algorithm")
    parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    parser.add_argument("--speculative-draft-model-revision")
    parser.add_argument("--served-model-name")
    parser.add_argument("--config")
    return parser


class _Sa:
    @staticmethod
    def prepare_server_args(argv: list[str]) -> argparse.Namespace:
        return _parser().parse_args(argv)


TABLE = from_dump(dump_options(_Sa))
SPELLINGS = [
    ["--trust-remote"],
    ["--trust-remote-cod"],
    ["--trust-remote-code"],
    ["--trust"],
    ["--model-pat", "X"],
    ["--model-pat=X"],
    ["--model", "X"],
    ["--model-path=X"],
    ["--speculative-draft-model-pat", "X"],
    ["--speculative-draft-model=X"],
    ["--model-path", "a", "--model-path", "b"],
    ["--tp", "2", "--tp=4"],
    ["--conf", "x.yaml"],
]


@pytest.mark.parametrize("argv", SPELLINGS, ids=" ".join)
def test_expansion_agrees_with_argparse(argv: list[str]) -> None:
    """Each option resolves to the destination Python's argparse gives it."""
    ns = vars(_parser(required=False).parse_known_args(argv)[0])
    got: dict[str, str | None] = {}
    for item in expand(argv, TABLE):
        assert item.option is not None and item.dest is not None
        got[item.dest] = item.values[-1] if item.values else None
    changed = {k: v for k, v in ns.items() if v not in (None, False)}
    assert set(got) == set(changed)
    for dest, value in got.items():
        assert value is None or str(changed[dest]) == value


def test_an_ambiguous_prefix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["--model-path", "m", "--spec", "X"])
    out, _, notes = substitute_argv(["--spec", "X"], "LlamaForCausalLM", tmp_path, TABLE)
    assert out is None and "ambiguous option: --spec" in notes[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--trust-remote", "--model-pat", "/srv/evil"],
        ["--trust-remote-cod", "--model-pat=/srv/evil"],
        ["--model", "a/../../..", "--trust-remote-code"],
        ["--model-path", "ok", "--model-path", "jobs/../../../srv/evil"],
        [
            "--model",
            "m",
            "--speculative-algorithm",
            "DFLASH",
            "--speculative-draft-model-pat",
            "/srv/evil",
            "--trust-remote",
        ],
    ],
    ids=" ".join,
)
def test_no_user_path_or_remote_code_survives(argv: list[str], tmp_path: Path) -> None:
    """Whatever the spelling, the argv as run parses (with the real parser) to generated
    folders only, no trust_remote_code, no config."""
    home = tmp_path / "home"
    out, _, notes = substitute_argv(argv, "LlamaForCausalLM", home, TABLE)
    assert out is not None, notes
    ns = _parser().parse_args(out)
    assert ns.trust_remote_code is False and ns.config is None
    for value in (ns.model_path, ns.tokenizer_path, ns.speculative_draft_model_path):
        assert value is None or Path(value).parent == home / "replay-models"
    assert "/srv/evil" not in " ".join(out) and "a/../../.." not in " ".join(out)


def test_values_that_name_files_are_dropped(tmp_path: Path, monkeypatch) -> None:
    """Any value with '/', '..', '~' or naming an existing file is dropped."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local-file").write_text("x")
    for value in ("org/name", "..", "~root", "local-file"):
        out, _, notes = substitute_argv(
            ["--served-model-name", value], "LlamaForCausalLM", tmp_path / "home", TABLE
        )
        assert out is not None and value not in out, value
        assert "--served-model-name" in notes[0]


def test_the_child_guard_refuses_with_the_real_parser(tmp_path: Path) -> None:
    """Even if the parent's filter were bypassed, the child's check on the real namespace
    refuses an abbreviated --trust-remote or a model path that is not generated."""
    from service.replay.child import guard as child_guard

    allowed = str(tmp_path / "gen")
    child_guard.install_argv_guard([allowed])
    try:
        with pytest.raises(child_guard.UnsafeArgv, match="trust_remote_code"):
            _parser().parse_args(["--model-path", allowed, "--trust-remote"])
        with pytest.raises(child_guard.UnsafeArgv, match="model_path"):
            _parser().parse_args(["--model-pat=/srv/evil"])
        ns = _parser().parse_args(["--model-path", allowed, "--tp", "2"])
        assert ns.tp_size == 2
    finally:
        original = argparse.ArgumentParser.parse_known_args
        argparse.ArgumentParser.parse_known_args = original.__wrapped__  # type: ignore[attr-defined]


@pytest.mark.skipif(
    not sandbox.status().available or not sandbox.privileged(),
    reason="needs bubblewrap and a root service",
)
def test_the_sandbox_is_host_nobody_and_cannot_read_root_files(tmp_path: Path) -> None:
    secret = tmp_path / "root-only"
    secret.write_text("s3cret-root-only")
    secret.chmod(0o600)
    work = tmp_path / "work"
    work.mkdir()
    sandbox.prepare_workdir(work)
    cmd = sandbox.command(
        ["sh", "-c", f"cat {secret} > got 2>&1; id -u > uid; touch made"],
        workdir=work,
        hidden=[],
        readable=[tmp_path],
    )
    subprocess.run(cmd, check=True, timeout=60)
    assert (work / "made").stat().st_uid == 65534 and (work / "made").stat().st_gid == 65534
    assert (work / "uid").read_text().strip() == "65534"
    assert "s3cret" not in (work / "got").read_text()
    assert os.stat(secret).st_uid == 0


def test_a_missing_model_path_gets_a_generated_one(tmp_path: Path) -> None:
    """Where the release requires --model-path, argparse refuses its absence (nothing is
    loaded); where it does not, the run gets a generated folder, never a default."""
    out, _, _ = substitute_argv(["--tp", "1"], "LlamaForCausalLM", tmp_path, TABLE)
    assert out == ["--tp", "1"]
    with pytest.raises(SystemExit):
        _parser().parse_args(out)
    optional = from_dump(
        {
            **dump_options(_Sa),
            "options": {k: [v[0], v[1], False] for k, v in dump_options(_Sa)["options"].items()},
        }
    )
    out, _, _ = substitute_argv(["--tp", "1"], "LlamaForCausalLM", tmp_path, optional)
    assert out is not None
    assert Path(_parser().parse_args(out).model_path).parent == tmp_path / "replay-models"


def test_fallback_table_is_used_without_a_parser(tmp_path: Path) -> None:
    out, _, _ = substitute_argv(
        ["--trust-remote", "--model-pat", "/x"], "LlamaForCausalLM", tmp_path
    )
    assert out is not None and "--trust-remote" not in out and "/x" not in out
    assert isinstance(TABLE, OptionTable) and TABLE.source == "parser"


def test_the_option_table_is_read_once_and_kept(tmp_path: Path) -> None:
    """One dump per tree (then memory, then <home>/replay-options/); a failed read is not
    retried; a caller with no time left gets None while the read goes on."""
    import threading

    from service.replay import options

    tree = tmp_path / "tree"
    (tree / "sglang" / "srt").mkdir(parents=True)
    (tree / "sglang" / "srt" / "server_args.py").write_text("x = 1\n")
    calls: list[int] = []
    release = threading.Event()

    def dump() -> dict:
        release.wait(30)
        calls.append(1)
        return dump_options(_Sa)

    assert options.option_table(tree, tmp_path, dump, wait_s=0.0) is None  # started
    release.set()
    table = options.option_table(tree, tmp_path, dump)
    assert table is not None and table.options["--model-path"] == ("model_path", "1")
    assert options.option_table(tree, tmp_path, dump) is table and calls == [1]
    assert list((tmp_path / "replay-options").glob("*.json"))
    broken = tmp_path / "broken"
    (broken / "sglang" / "srt").mkdir(parents=True)
    failures: list[int] = []
    assert options.option_table(broken, tmp_path, lambda: failures.append(1)) is None
    assert options.option_table(broken, tmp_path, lambda: failures.append(1)) is None
    assert failures == [1]


def test_only_sglangs_own_message_enters_an_answer(tmp_path: Path) -> None:
    """A message raised by SGLang's check (a literal of its raise statement) is kept; one
    raised by other code, or not matching the raise, is replaced by type + fixed note."""
    from service.replay.messages import WITHHELD, vet

    src = tmp_path / "sglang" / "srt"
    src.mkdir(parents=True)
    (src / "server_args.py").write_text(
        "def check(x):\n"
        "    if x:\n"
        "        raise ValueError(\n"
        "            f'DFLASH requires --speculative-dflash-block-size to be positive, got {x}.'\n"
        "        )\n"
    )
    frame = {"kind": "sglang", "path": "sglang/srt/server_args.py", "line": 3}
    ok = {
        "status": "raised",
        "exception_type": "ValueError",
        "all_frames": [frame],
        "message": "DFLASH requires --speculative-dflash-block-size to be positive, got -1.",
    }
    assert vet(ok, tmp_path)["message"] == ok["message"]
    forged = {**ok, "message": "root-secret-123"}
    assert vet(forged, tmp_path)["message"] == f"ValueError ({WITHHELD})"
    outside = {
        "status": "harness_error",
        "exception_type": "RuntimeError",
        "message": "EVIL root-secret-123",
        "harness_reason": "raised outside SGLang's code: RuntimeError: EVIL root-secret",
        "all_frames": [
            frame,
            {
                "kind": "stdlib",
                "path": "evil.py",
                "line": 9,
                "code": "raise RuntimeError(open('/x').read())",
            },
        ],
    }
    vetted = vet(outside, tmp_path)
    assert "secret" not in str(vetted) and "open(" not in str(vetted)
    assert vetted["harness_reason"].startswith("raised outside SGLang's code")
    argparse_error = {"status": "argparse_error", "message": "unrecognized arguments: --x"}
    assert vet(argparse_error, tmp_path)["message"] == "unrecognized arguments: --x"
