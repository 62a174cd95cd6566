"""The cheap ways of finding statements and reference candidates agree with the
tree-sitter query they replace: same nodes, and the same rows downstream."""

from __future__ import annotations

import gc
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest import ts
from ingest.analyze import analyze_batch
from ingest.checks import extract_checks
from ingest.refs import extract_refs, ref_candidates
from kb.sources import ReleaseSource

#: Starts with a blank line on purpose: a module node starts at its first token.
TRICKY = textwrap.dedent('''

    import dataclasses

    def declare_resolution(*a, **k): ...

    @dataclasses.dataclass
    class ServerArgs:
        tp_size: int = 1

        async def handle(self, args, sa, cfg):
            """Mentions args.fake and return {"x": 1} in a docstring."""
            # server_args.in_comment = 1
            label = f"{args.tp_size} {'args.not_code'}"
            with open("x") as fh, ctx() as c:
                if self.tp_size > 1:
                    assert sa.page_size, "no page size"
                elif (cfg
                      .dp_size) == 2:
                    setattr(self, "dp_size", 2)
                else:
                    raise ValueError(resolved_view(self).mode)
            for i in range(3):
                while i:
                    try:
                        pass
                    except* ValueError:
                        raise
                    finally:
                        args.attempts += 1
            else:
                server_args.x, server_args.y = 1, 2
            match args.mode:
                case "a" if sa.flag:
                    def nested():
                        assert cfg.z
                    return {"mode": args.mode, 3: "skip"}
                case _:
                    return (
                        {"parenthesized": 1}
                    )
            myargs.nope = 1
            args_.nope = 2
            resolved_view(server_args, args).viewed = 3
            args.resolved_view(sa).nested = 4
            hooks.declare_resolution(server_args, "src", chosen=args.pick)
            (setattr)(args, "ignored", 1)
            lambda: args.in_lambda
            return {"final": [sa.a for sa in items]}


    class Other:
        def method(self):
            self.not_args = 1
            return self.not_args
''')


def _sorted(nodes) -> list[int]:
    return sorted(n.start_byte for n in nodes)


def _rows(refs) -> list[tuple]:
    return [(r.attr, r.kind, r.line, r.obj, r.value, [g.as_dict() for g in r.guards]) for r in refs]


def _assert_same(source: bytes) -> None:
    root = ts.parse(source).root_node
    queried = ts.captures(ts.FILE_QUERY, root)
    walked = ts.statement_captures(root)
    for key in ("f", "a", "r"):
        assert _sorted(walked[key]) == _sorted(queried.get(key, [])), key
        # the walk yields them in document order
        assert [n.start_byte for n in walked[key]] == _sorted(walked[key]), key
    assert extract_checks(root, walked) == extract_checks(root, queried)
    assert _rows(extract_refs(root, walked)) == _rows(extract_refs(root, queried))


def test_statement_walk_and_ref_candidates_match_the_query_on_tricky_code() -> None:
    source = TRICKY.encode()
    _assert_same(source)
    root = ts.parse(source).root_node
    refs = {(r.attr, r.kind, r.obj) for r in extract_refs(root, ts.statement_captures(root))}
    # the hand-checked part: words in strings and comments and longer names are not refs,
    # view calls, setattr, declare_resolution and returned dicts are
    assert ("fake", "read", "args") not in refs and (
        "in_comment",
        "write",
        "server_args",
    ) not in refs
    assert ("nope", "write", "myargs") not in refs and ("nope", "write", "args_") not in refs
    assert ("viewed", "write", "resolved_view(server_args, args)") in refs
    assert ("nested", "write", "args.resolved_view(sa)") in refs  # starts where args.… does
    assert ("resolved_view", "read", "args") in refs
    assert ("mode", "read", "resolved_view(self)") not in refs  # only a named receiver is
    assert ("dp_size", "write", "self") in refs and (
        "chosen",
        "declare",
        "declare_resolution",
    ) in refs
    assert ("mode", "return_dict", "return") in refs and ("final", "return_dict", "return") in refs
    assert ("attempts", "write", "args") in refs and ("in_lambda", "read", "args") in refs
    assert ("not_args", "write", "self") not in refs
    assert ("ignored", "write", "args") not in refs  # a parenthesised callee is not read


def test_ref_candidates_hold_each_node_once() -> None:
    root = ts.parse(b"resolved_view(args, sa).x = 1\nreturn_value = args.y\n").root_node
    found = ref_candidates(root, with_self=False)
    assert [ts.text(n) for n in found["attr"]] == ["resolved_view(args, sa).x", "args.y"]
    assert found["ret"] == [] and found["call"] == []


def test_a_tree_with_syntax_errors_is_left_to_the_query() -> None:
    source = b"def f(:\n    assert args.x\nclass C:\n    def g(self): raise E(args.y)\n"
    root = ts.parse(source).root_node
    assert root.has_error
    queried = ts.captures(ts.FILE_QUERY, root)
    walked = ts.statement_captures(root)
    for key in ("f", "a", "r", "attr", "call", "ret"):  # one query serves statements and refs
        assert _sorted(walked.get(key, [])) == _sorted(queried.get(key, []))
    assert _rows(extract_refs(root, walked)) == _rows(
        extract_refs(root, ts.captures(ts.FILE_QUERY, root))
    )


def test_real_release_files_give_the_same_rows(
    sglang_source: Callable[[str], ReleaseSource], source_root: Callable[[ReleaseSource], Path]
) -> None:
    """The validation surface of a real release (where refs matter most) and a sample of
    its other files agree with the query, node for node."""
    src = sglang_source("0.5.11")
    files = sorted(src.package_dir.rglob("*.py"))
    picked = [f for f in files if f.name in ("server_args.py", "model_config.py")] + files[::40]
    if not picked:
        pytest.skip("no source files")
    for f in picked:
        _assert_same(f.read_bytes())


def test_analyzing_files_leaves_no_reference_cycles() -> None:
    """Trees and nodes are freed by reference counting, with the collector paused
    during a batch: a cycle (a recursive closure, say) would keep them all alive."""
    gc.collect()
    gc.disable()
    try:
        out = analyze_batch(("v", [("a.py", TRICKY.encode()), ("b.py", b"def f(:\n  pass\n")]))
        assert out.files == 2 and out.tables["functions"]
        assert gc.collect() == 0
    finally:
        gc.enable()
