"""The static flag catalog, on real SGLang releases and on synthetic layouts."""

from __future__ import annotations

import ast
import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

from ingest.catalog import extract_catalog
from ingest.static import ModuleLoader, StaticEvaluator
from kb.catalog_types import Catalog


def _extract(sglang_source, version: str) -> Catalog:
    return extract_catalog(sglang_source(version).package_dir)


@pytest.fixture(scope="module")
def cat_059(sglang_source) -> Catalog:
    return _extract(sglang_source, "0.5.9")


@pytest.fixture(scope="module")
def cat_0511(sglang_source) -> Catalog:
    return _extract(sglang_source, "0.5.11")


@pytest.fixture(scope="module")
def cat_0523(sglang_source) -> Catalog:
    return _extract(sglang_source, "0.5.23")


@pytest.mark.parametrize("version", ["0.5.9", "0.5.11", "0.5.23"])
def test_extraction_work_is_bounded(sglang_source, monkeypatch, version: str) -> None:
    """Extraction reads a release statically and on demand: each file is parsed at most
    once, the files parsed are a small part of the release's Python source (the scanned
    files and what their flags' values come from, never the whole package), and the
    static evaluator does a few steps per flag, not a blow-up."""
    package_dir = sglang_source(version).package_dir
    parsed: list[Path] = []
    evals = 0
    parse, evaluate = ModuleLoader._parse, StaticEvaluator.eval

    def counting_parse(self, dotted, path):
        parsed.append(path)
        return parse(self, dotted, path)

    def counting_eval(self, *args, **kwargs):
        nonlocal evals
        evals += 1
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(ModuleLoader, "_parse", counting_parse)
    monkeypatch.setattr(StaticEvaluator, "eval", counting_eval)
    catalog = extract_catalog(package_dir)

    twice = sorted({p.name for p in parsed if parsed.count(p) > 1})
    assert parsed and not twice, twice  # the loader parses a file only once
    read = sum(p.stat().st_size for p in parsed)
    total = sum(p.stat().st_size for p in package_dir.rglob("*.py"))
    assert read < total / 10, (read, total)  # 2-4% on these releases
    records = len(catalog.flags) + len(catalog.declarations)
    assert evals <= 10 * records, (evals, records)  # under 2 per flag or declaration


# ---------------------------------------------------------------------------
# 0.5.11: dataclass + argparse layout
# ---------------------------------------------------------------------------


def test_0511_speculative_eagle_topk(cat_0511: Catalog) -> None:
    spec = cat_0511.by_flag()["--speculative-eagle-topk"]
    assert spec.attr == "speculative_eagle_topk"
    assert spec.flags == ["--speculative-eagle-topk"]
    assert spec.type == "int"
    assert spec.default is None and spec.default_known
    assert spec.default_src == "ServerArgs.speculative_eagle_topk"
    assert spec.layout == "argparse"
    assert spec.path == "sglang/srt/server_args.py"
    assert spec.help and "eagle" in spec.help.lower()


def test_0511_declaration_line(cat_0511: Catalog, sglang_source) -> None:
    decl = cat_0511.declaration("speculative_eagle_topk")
    assert decl is not None
    assert (decl.path, decl.line, decl.cls) == ("sglang/srt/server_args.py", 520, "ServerArgs")
    assert decl.annotation == "Optional[int]"
    assert decl.default is None and decl.default_known and decl.default_src == "None"
    # the line really holds the field
    lines = (sglang_source("0.5.11").package_dir / "srt/server_args.py").read_text().splitlines()
    assert lines[decl.line - 1].strip().startswith("speculative_eagle_topk:")


def test_0511_add_argument_line_points_at_call(cat_0511: Catalog, sglang_source) -> None:
    spec = cat_0511.by_flag()["--speculative-eagle-topk"]
    lines = (sglang_source("0.5.11").package_dir / "srt/server_args.py").read_text().splitlines()
    assert "add_argument(" in lines[spec.line - 1]
    assert '"--speculative-eagle-topk"' in lines[spec.line]


def test_0511_tp_size_spellings(cat_0511: Catalog) -> None:
    by_flag = cat_0511.by_flag()
    # 0.5.11 has no literal "--tp" spelling; "--tp" works through argparse abbreviation
    assert "--tp" not in by_flag
    spec = by_flag["--tp-size"]
    assert spec is by_flag["--tensor-parallel-size"]
    assert spec.flags == ["--tensor-parallel-size", "--tp-size"]
    # argparse dest is tensor_parallel_size; ServerArgs.from_cli_args renames it
    assert spec.attr == "tp_size" and spec.dest == "tensor_parallel_size"
    assert spec.type == "int" and spec.default == 1
    assert cat_0511.by_attr()["tp_size"] is spec
    assert by_flag["--ep"].attr == "ep_size"


def test_0511_choices_resolved(cat_0511: Catalog) -> None:
    spec = cat_0511.by_flag()["--attention-backend"]
    assert spec.choices_src == "ATTENTION_BACKEND_CHOICES"
    assert spec.choices and {"fa3", "trtllm_mha", "flashinfer", "triton"} <= set(spec.choices)
    # class-attribute dict keys: list(ReasoningParser.DetectorMap.keys())
    rp = cat_0511.by_flag()["--reasoning-parser"]
    assert rp.choices and "kimi_k2" in rp.choices and "deepseek-r1" in rp.choices
    # local variable assigned earlier in add_cli_args
    tcp = cat_0511.by_flag()["--tool-call-parser"]
    assert tcp.choices_src == "tool_call_parser_choices"
    assert tcp.choices and "kimi_k2" in tcp.choices
    # constant imported from another module (sglang.srt.utils -> star import of utils.common)
    lora = cat_0511.by_flag()["--lora-target-modules"]
    assert lora.choices and "q_proj" in lora.choices and "all" in lora.choices
    # set literal constant keeps its source order
    assert cat_0511.by_flag()["--sampling-backend"].choices == ["flashinfer", "pytorch", "ascend"]


def test_0511_actions_defaults_required(cat_0511: Catalog) -> None:
    by_flag = cat_0511.by_flag()
    model = by_flag["--model-path"]
    assert model.flags == ["--model-path", "--model"] and model.required
    trc = by_flag["--trust-remote-code"]
    assert trc.action == "store_true" and trc.default is False and trc.default_known
    assert trc.type is None and not trc.required
    # computed default in the dataclass: 10 * 1000 * 1000
    assert by_flag["--speculative-ngram-capacity"].default == 10_000_000
    # subscript of a module constant: ENCODER_TRANSFER_BACKEND_CHOICES[0]
    assert by_flag["--encoder-transfer-backend"].default == "zmq_to_scheduler"
    # custom type callable is kept by name
    assert by_flag["--context-length"].type == "human_readable_int"
    # BooleanOptionalAction gets its --no- spellings
    strict = by_flag["--lora-strict-loading"]
    assert strict.action == "BooleanOptionalAction"
    assert "--no-lora-strict-loading" in strict.flags
    assert by_flag["--no-lora-strict-loading"] is strict
    # nargs
    assert (
        by_flag["--lora-paths"].nargs == "*" and by_flag["--lora-paths"].action == "LoRAPathAction"
    )


def test_0511_deprecated(cat_0511: Catalog) -> None:
    by_flag = cat_0511.by_flag()
    old = by_flag["--stream-output"]
    assert old.deprecated and old.action == "DeprecatedStoreTrueAction"
    assert old.attr == "incremental_streaming_output"
    assert old.nargs == "0" and old.default is False  # from the action class' __init__
    live = by_flag["--incremental-streaming-output"]
    assert not live.deprecated
    # different actions writing one attr stay separate; by_attr prefers the live one
    assert cat_0511.by_attr()["incremental_streaming_output"] is live
    assert {s.flags[0] for s in cat_0511.specs_for("incremental_streaming_output")} == {
        "--stream-output",
        "--incremental-streaming-output",
    }
    assert by_flag["--hybrid-kvcache-ratio"].deprecated
    assert not by_flag["--attention-backend"].deprecated


def test_0511_counts(cat_0511: Catalog, sglang_source) -> None:
    text = (sglang_source("0.5.11").package_dir / "srt/server_args.py").read_text()
    assert len(cat_0511.flags) == text.count(".add_argument(")  # 374: one spec per call
    assert len(cat_0511.by_flag()) > len(cat_0511.flags)
    assert all(s.layout == "argparse" for s in cat_0511.flags)
    assert len(cat_0511.declarations) > 300
    assert sum(not s.default_known for s in cat_0511.flags) <= 5


# ---------------------------------------------------------------------------
# 0.5.23: annotated namespace fields + manual registrations
# ---------------------------------------------------------------------------


def test_0523_flag_count(cat_0523: Catalog) -> None:
    assert len(cat_0523.flags) >= 500
    layouts = {s.layout for s in cat_0523.flags}
    assert layouts == {"annotated_field", "argparse"}


def test_0523_speculative_eagle_topk(cat_0523: Catalog, sglang_source) -> None:
    spec = cat_0523.by_flag()["--speculative-eagle-topk"]
    assert spec.layout == "annotated_field"
    assert spec.path.startswith("sglang/srt/arg_groups/fields/")
    assert spec.attr == "speculative_eagle_topk" and spec.type == "int"
    assert spec.default is None and spec.default_known
    assert spec.help == "The number of tokens sampled from the draft model in eagle2 each step."
    decl = cat_0523.declaration("speculative_eagle_topk")
    assert decl is not None and decl.cls == "Spec" and decl.line == spec.line
    lines = (sglang_source("0.5.23").package_dir.parent / spec.path).read_text().splitlines()
    assert lines[spec.line - 1].strip().startswith("speculative_eagle_topk:")


def test_0523_manual_flags(cat_0523: Catalog) -> None:
    by_flag = cat_0523.by_flag()
    rp = by_flag["--reasoning-parser"]
    assert rp.layout == "argparse" and rp.path == "sglang/srt/server_args.py"
    # ["auto"] + _reasoning_parser_choices() -> REASONING_PARSER_NAMES via a local import
    assert rp.choices and rp.choices[0] == "auto" and "kimi_k2" in rp.choices
    dp = by_flag["--enable-dp-attention"]
    assert dp.deprecated and dp.action == "DeprecatedStoreTrueAction"
    assert dp.extra.get("new_flag") == "--attn-dp-size <dp-size>"
    assert "--config" in by_flag
    mono = by_flag["--monokernel-backend"]
    assert mono.deprecated and mono.attr == "enable_amd_monokernel"
    assert mono.nargs is None and mono.choices == ["amd"]  # explicit nargs=None wins
    assert mono.extra.get("const_value") is True


def test_0523_annotated_rules(cat_0523: Catalog) -> None:
    by_flag = cat_0523.by_flag()
    tp = by_flag["--tp-size"]
    assert tp.flags == ["--tp-size", "--tensor-parallel-size"] and tp.attr == "tp_size"
    assert tp.type == "int" and tp.default == 1
    model = by_flag["--model-path"]
    assert model.flags == ["--model-path", "--model"] and model.required
    assert by_flag["--ep"].attr == "ep_size"
    # cli_name overrides the derived spelling, dest stays the field name
    fp8 = by_flag["--fp8-gemm-backend"]
    assert fp8.attr == "fp8_gemm_runner_backend" and fp8.flags == ["--fp8-gemm-backend"]
    # choices from a constant imported from arg_groups/choices.py
    ab = by_flag["--attention-backend"]
    assert ab.layout == "annotated_field" and ab.choices and "fa3" in ab.choices
    # Literal[...] -> choices
    literal_specs = [
        s for s in cat_0523.flags if s.choices_src and s.choices_src.startswith("Literal")
    ]
    assert literal_specs and all(s.choices for s in literal_specs)
    # bool -> store_true; list -> nargs "+"
    assert by_flag["--trust-remote-code"].action == "store_true"
    assert any(s.nargs == "+" for s in cat_0523.flags if s.layout == "annotated_field")
    # no_cli fields produce no flag but keep their declaration
    assert "speculative_boundary_reduction" not in cat_0523.by_attr()
    assert cat_0523.declaration("speculative_boundary_reduction") is not None
    # BooleanOptionalAction fields get --no- spellings
    boolopt = [s for s in cat_0523.flags if s.action == "BooleanOptionalAction"]
    assert boolopt and all(any(f.startswith("--no-") for f in s.flags) for s in boolopt)


def test_0523_matches_python_ast_reading(cat_0523: Catalog, sglang_source) -> None:
    """Cross-check the tree-sitter reading against ``ast`` on these (valid) files."""
    fields_dir = sglang_source("0.5.23").package_dir / "srt/arg_groups/fields"
    expected: set[str] = set()
    for path in fields_dir.glob("*.py"):
        for cls in (n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if not (
                    isinstance(stmt, ast.AnnAssign) and isinstance(stmt.annotation, ast.Subscript)
                ):
                    continue
                if getattr(stmt.annotation.value, "id", None) not in ("A", "Annotated"):
                    continue
                for meta in stmt.annotation.slice.elts[1:]:  # type: ignore[attr-defined]
                    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
                        expected.add(stmt.target.id)  # type: ignore[attr-defined]
                        break
                    if isinstance(meta, ast.Call) and getattr(meta.func, "id", None) == "Arg":
                        no_cli = any(
                            k.arg == "no_cli" and getattr(k.value, "value", None) is True
                            for k in meta.keywords
                        )
                        if not no_cli:
                            expected.add(stmt.target.id)  # type: ignore[attr-defined]
                        break
    got = {s.attr for s in cat_0523.flags if s.layout == "annotated_field"}
    assert got == expected


# ---------------------------------------------------------------------------
# 0.5.9 and cross-release sanity
# ---------------------------------------------------------------------------


def test_059_sanity(cat_059: Catalog) -> None:
    assert len(cat_059.flags) >= 300
    assert len(cat_059.by_flag()) >= len(cat_059.flags)
    assert all(s.layout == "argparse" for s in cat_059.flags)
    assert cat_059.by_flag()["--tp-size"].attr == "tp_size"
    assert cat_059.by_flag()["--speculative-eagle-topk"].type == "int"
    assert cat_059.declaration("speculative_eagle_topk") is not None
    assert "fa3" in (cat_059.by_flag()["--attention-backend"].choices or [])


@pytest.mark.parametrize("fixture", ["cat_059", "cat_0511", "cat_0523"])
def test_json_serialisable_and_unique_spellings(fixture: str, request) -> None:
    catalog: Catalog = request.getfixturevalue(fixture)
    json.dumps([dataclasses.asdict(s) for s in catalog.flags])
    json.dumps([dataclasses.asdict(d) for d in catalog.declarations])
    spellings = [f for s in catalog.flags for f in s.flags]
    assert len(spellings) == len(set(spellings))
    assert all(f.startswith("-") for f in spellings)
    for spec in catalog.flags:
        assert spec.line >= 1 and spec.path.startswith("sglang/")
        if not spec.default_known:
            assert spec.default is None and spec.default_src


# ---------------------------------------------------------------------------
# synthetic layouts
# ---------------------------------------------------------------------------


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_annotated_dataclass_layout_with_syntax_error(tmp_path: Path) -> None:
    """0.5.14-0.5.19 style: annotated fields on ServerArgs itself; a broken line elsewhere."""
    pkg = tmp_path / "sglang"
    _write(pkg, "__init__.py", "")
    _write(
        pkg,
        "srt/consts.py",
        """
        BACKENDS = ["a", "b"]
        EXTRA = BACKENDS + ["c"]
        """,
    )
    _write(
        pkg,
        "srt/server_args.py",
        """
        import dataclasses
        from typing import Annotated, List, Literal, Optional

        from sglang.srt.arg_groups.arg_utils import A, Arg
        from sglang.srt.consts import EXTRA as BACKEND_CHOICES

        LOCAL = ("x", "y")

        @dataclasses.dataclass
        class ServerArgs:
            model_path: A[str, Arg(help="Path.", aliases=["--model"])]
            tp_size: A[int, Arg(
                help="TP "
                "size.",
                cli_name="--tensor-parallel-size",
                aliases=["--tp-size"],
            )] = 1
            mode: Annotated[Literal["fast", "slow"], "The mode."] = "fast"
            backend: A[Optional[str], Arg(help="Backend.", choices=BACKEND_CHOICES)] = None
            local: A[str, Arg(choices=LOCAL)] = "x"
            ids: A[Optional[List[int]], "Some ids."] = dataclasses.field(default_factory=list)
            verbose: A[Optional[bool], "Verbose."] = False
            hidden: A[int, Arg(help="Hidden.", no_cli=True)] = 3
            plain: int = 5
            parsed: A[str, Arg(help="JSON.", type_parser=json_list_type)] = "[]"
            big: A[int, "Big."] = 10 * 1000

            def broken(self):
                x = (1 +

            @staticmethod
            def add_cli_args(parser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                parser.add_argument("--plain", type=int, default=ServerArgs.plain, help="Plain.")
                parser.add_argument("--old-mode", dest="mode", type=str, help="Deprecated. Use --mode.")
                parser.add_argument("--mode-alias", dest="mode", type=str, help="Same as --mode.")
        """,
    )
    source = (pkg / "srt/server_args.py").read_text()
    with pytest.raises(SyntaxError):
        ast.parse(source)

    catalog = extract_catalog(pkg)
    by_flag = catalog.by_flag()

    model = by_flag["--model"]
    assert model.flags == ["--model-path", "--model"] and model.required and model.type == "str"
    tp = by_flag["--tp-size"]
    assert tp.flags == ["--tensor-parallel-size", "--tp-size"] and tp.attr == "tp_size"
    assert tp.help == "TP size." and tp.default == 1 and tp.type == "int"
    mode = catalog.by_attr()["mode"]
    assert mode.choices == ["fast", "slow"] and mode.type == "str" and mode.help == "The mode."
    # a compatible manual spelling of the same attr is merged in; the deprecated one is not
    assert mode.flags == ["--mode", "--mode-alias"]
    assert by_flag["--old-mode"].deprecated and by_flag["--old-mode"] is not mode
    assert by_flag["--backend"].choices == ["a", "b", "c"]
    assert by_flag["--local"].choices == ["x", "y"]
    ids = by_flag["--ids"]
    assert ids.nargs == "+" and ids.type == "int" and ids.default == []
    verbose = by_flag["--verbose"]
    assert verbose.action == "store_true" and verbose.default is False
    assert "--hidden" not in by_flag
    assert by_flag["--plain"].layout == "argparse" and by_flag["--plain"].default == 5
    assert by_flag["--parsed"].type == "json_list_type" and by_flag["--parsed"].nargs is None
    assert by_flag["--big"].default == 10_000
    assert {d.attr for d in catalog.declarations} >= {"plain", "hidden", "model_path"}
    decl = catalog.declaration("tp_size")
    assert decl is not None and decl.cls == "ServerArgs" and decl.help == "TP size."
    assert decl.line == source.splitlines().index("    tp_size: A[int, Arg(") + 1


def test_add_argument_outside_scanned_files_ignored(tmp_path: Path) -> None:
    pkg = tmp_path / "sglang"
    _write(
        pkg,
        "srt/server_args.py",
        """
        import argparse

        def helper(group):
            group.add_argument("--from-helper", type=float, default=0.5, nargs=2)

        class ServerArgs:
            x: int = 1

            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser):
                group = parser.add_argument_group("g")
                group.add_argument("--x", type=int, default=ServerArgs.x, choices=range(3))
                helper(group)
                parser.add_argument(*NAMES)
        """,
    )
    _write(
        pkg,
        "bench_serving.py",
        """
        parser.add_argument("--num-prompts", type=int)
        """,
    )
    catalog = extract_catalog(pkg)
    by_flag = catalog.by_flag()
    assert set(by_flag) == {"--x", "--from-helper"}
    assert by_flag["--x"].default == 1 and by_flag["--x"].choices is None
    assert by_flag["--x"].choices_src == "range(3)"
    helper = by_flag["--from-helper"]
    assert helper.nargs == "2" and helper.type == "float" and helper.default == 0.5
