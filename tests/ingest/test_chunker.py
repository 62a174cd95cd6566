"""Chunking and check extraction on small, hand-written sources."""

from __future__ import annotations

import ast
import textwrap

from ingest import chunker, ts
from ingest.checks import extract_checks
from ingest.refs import extract_refs

SOURCE = textwrap.dedent('''
    import functools

    LIMIT = 3


    class ServerArgs:
        """Args."""

        tp_size: int = 1
        page_size: int | None = None

        @functools.cache
        def check(self, x: int = 2) -> bool:
            """Validate.

            More text.
            """
            def inner(y):
                return y + 1

            if self.tp_size > 1:
                if self.page_size is None:
                    assert (
                        x > 1
                        and self.tp_size < 8
                    )
                elif self.page_size == 1:
                    raise ValueError(f"page size {self.page_size} unsupported")
                else:
                    self.page_size = 16
            return inner(x)


    def outer():
        def middle():
            def inner():
                pass
            return inner
        return middle
''')


def _parse(src: str):
    data = src.encode()
    return data, ts.parse(data).root_node


def test_functions_have_qualnames_lines_and_metadata_like_python_ast() -> None:
    data, root = _parse(SOURCE)
    fc = chunker.chunk_file("sglang/x.py", root, data)
    by_q = {f.qualname: f for f in fc.functions}
    assert set(by_q) == {
        "ServerArgs.check",
        "ServerArgs.check.<locals>.inner",
        "outer",
        "outer.<locals>.middle",
        "outer.<locals>.middle.<locals>.inner",
    }
    tree = ast.parse(SOURCE)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    check = next(n for n in cls.body if isinstance(n, ast.FunctionDef))
    fn = by_q["ServerArgs.check"]
    assert (fn.start_line, fn.end_line) == (check.lineno, check.end_lineno)
    assert fn.decorators == ["functools.cache"]
    assert fn.decorator_start == check.lineno - 1
    assert fn.signature == "def check(self, x: int = 2) -> bool"
    assert fn.docstring is not None and fn.docstring.startswith("Validate.")
    assert fn.class_name == "ServerArgs"
    assert by_q["ServerArgs.check.<locals>.inner"].parent == "ServerArgs.check"


def test_chunks_tile_the_file_and_fit_the_budget() -> None:
    body = "\n".join(
        f"    value_{i} = compute_something(argument_{i}, other={i})" for i in range(200)
    )
    src = f"def big(a):\n    if a:\n{textwrap.indent(body, '    ')}\n    return a\n"
    data, root = _parse(src)
    fc = chunker.chunk_file("sglang/big.py", root, data)
    parts = [c for c in fc.chunks if c.qualname == "big"]
    assert len(parts) > 3
    assert all(c.kind == "function_part" and c.parts == len(parts) for c in parts)
    assert all(chunker._weight(c.text) <= chunker.MAX_CHUNK_CHARS for c in parts)
    # contiguous, no overlap, cover the whole function
    assert parts[0].start_line == 1 and parts[-1].end_line == src.count("\n")
    for a, b in zip(parts, parts[1:], strict=False):
        assert b.start_line == a.end_line + 1
    assert parts[1].header == "# sglang/big.py :: big (part)"
    assert "big" in parts[1].embed_text.splitlines()[0]
    # the header carries no line numbers, so a moved function keeps its text hash
    moved = chunker.chunk_file("sglang/big.py", *reversed(_parse("\n\n" + src)))
    assert [c.text_hash for c in moved.chunks] == [c.text_hash for c in fc.chunks]


def test_module_and_class_level_code_is_chunked() -> None:
    data, root = _parse(SOURCE)
    fc = chunker.chunk_file("sglang/x.py", root, data)
    kinds = {(c.kind, c.qualname) for c in fc.chunks}
    assert ("module", "<module>") in kinds
    assert ("class", "ServerArgs") in kinds
    cls_chunk = next(c for c in fc.chunks if c.kind == "class")
    assert "tp_size: int = 1" in cls_chunk.text


def test_checks_carry_guard_chains_lines_and_messages() -> None:
    _, root = _parse(SOURCE)
    checks = extract_checks(root)
    assert [c.kind for c in checks] == ["assert", "raise"]
    a, r = checks
    lines = SOURCE.split("\n")
    assert lines[a.start_line - 1].strip() == "assert ("
    assert lines[a.end_line - 1].strip() == ")"
    assert (a.test_start, a.test_end) == (a.start_line + 1, a.start_line + 2)
    assert a.bare and a.exc_type == "AssertionError"
    assert [(g.condition, g.polarity) for g in a.guards] == [
        ("self.tp_size > 1", True),
        ("self.page_size is None", True),
    ]
    assert r.exc_type == "ValueError" and not r.bare
    assert r.message == 'f"page size {self.page_size} unsupported"'
    assert [(g.condition, g.polarity, g.kind) for g in r.guards] == [
        ("self.tp_size > 1", True, "if"),
        ("self.page_size is None", False, "elif"),
        ("self.page_size == 1", True, "elif"),
    ]


def test_early_exit_is_a_negative_guard() -> None:
    src = "def f(cfg):\n    if not cfg.enabled:\n        return\n    assert cfg.size > 0\n"
    _, root = _parse(src)
    (check,) = extract_checks(root)
    assert [(g.condition, g.polarity, g.kind) for g in check.guards] == [
        ("not cfg.enabled", False, "early_exit")
    ]


def test_refs_reads_writes_and_resolution_declarations() -> None:
    src = textwrap.dedent("""
        def hook(server_args):
            cfg = resolving_view(server_args)
            if cfg.speculative_eagle_topk is None:
                declare_resolution(server_args, "hook", speculative_eagle_topk=1)
            server_args.page_size = 64
            if resolved_view(server_args).disable_overlap_schedule:
                pass
            return {"cuda_graph_max_bs": 8}
    """)
    _, root = _parse(src)
    refs = {(r.attr, r.kind) for r in extract_refs(root)}
    assert ("speculative_eagle_topk", "read") in refs
    assert ("speculative_eagle_topk", "declare") in refs
    assert ("page_size", "write") in refs
    assert ("disable_overlap_schedule", "read") in refs
    assert ("cuda_graph_max_bs", "return_dict") in refs
    declare = next(r for r in extract_refs(root) if r.kind == "declare")
    assert declare.value == "1"
    assert declare.guards[0].condition == "cfg.speculative_eagle_topk is None"


def test_self_refs_count_only_inside_the_args_class() -> None:
    src = "class Other:\n    def f(self):\n        return self.tp_size\n"
    _, root = _parse(src)
    assert extract_refs(root) == []


def test_syntax_errors_are_indexed_as_far_as_they_parse() -> None:
    src = "def good():\n    assert x\n\ndef bad(:\n    pass\n\ndef later():\n    raise ValueError('v')\n"
    data = src.encode()
    tree = ts.parse(data)
    assert ts.error_lines(tree)
    fc = chunker.chunk_file("sglang/broken.py", tree.root_node, data)
    assert "good" in {f.qualname for f in fc.functions}
    assert {c.kind for c in extract_checks(tree.root_node)} == {"assert", "raise"}


def _long_function(n: int, inserted: int | None = None) -> str:
    """A function of ``n`` distinct statements, with one extra statement after ``inserted``."""
    lines = ["def configure(server_args):"]
    for i in range(n):
        lines.append(f"    server_args.option_{i} = resolve_value(server_args, 'option_{i}', {i})")
        if i == inserted:
            lines.append("    server_args.extra_option = compute_extra(server_args.option_7)")
    return "\n".join(lines) + "\n"


def test_an_edit_in_a_long_function_changes_only_the_sub_chunk_it_falls_in() -> None:
    before = chunker.chunk_file("sglang/c.py", *reversed(_parse(_long_function(120))))
    after = chunker.chunk_file("sglang/c.py", *reversed(_parse(_long_function(120, inserted=60))))
    assert len(before.chunks) > 6
    old = {c.text_hash for c in before.chunks}
    new = [c for c in after.chunks if c.text_hash not in old]
    # content-defined cuts re-synchronise right after the edit: one or two new texts,
    # and every part before and after the edit keeps its text (and its vector)
    assert 1 <= len(new) <= 2
    assert any("extra_option" in c.text for c in new)
    assert len(after.chunks) - len(new) >= len(before.chunks) - 2
    for fc in (before, after):  # still a tiling within the budget
        parts = fc.chunks
        assert parts[0].start_line == 1
        assert all(b.start_line == a.end_line + 1 for a, b in zip(parts, parts[1:], strict=False))
        assert all(chunker._weight(c.text) <= chunker.MAX_CHUNK_CHARS for c in parts)


def test_a_split_unit_keeps_its_part_headers_when_it_gains_a_part() -> None:
    short = chunker.chunk_file("sglang/c.py", *reversed(_parse(_long_function(40))))
    longer = chunker.chunk_file("sglang/c.py", *reversed(_parse(_long_function(60))))
    assert len(longer.chunks) > len(short.chunks) > 1
    assert {c.header for c in short.chunks} == {"# sglang/c.py :: configure (part)"}
    # the first parts are the same text in both (no "part i/n" in the header)
    assert short.chunks[0].text_hash == longer.chunks[0].text_hash


def _enclosing_by_scan(functions: list, line: int):
    """The innermost function whose ``def``..end range holds ``line``, by a linear scan
    (the lookup ingest used before it bisected)."""
    best = None
    for fn in functions:
        if fn.start_line <= line <= fn.end_line and (
            best is None or fn.start_line >= best.start_line
        ):
            best = fn
    return best


def test_enclosing_function_by_bisection_matches_the_linear_scan() -> None:
    from ingest.analyze import _Enclosing

    data, root = _parse(SOURCE)
    functions = chunker.chunk_file("sglang/x.py", root, data).functions
    where = _Enclosing(functions)
    for line in range(1, SOURCE.count("\n") + 2):
        fn = _enclosing_by_scan(functions, line)
        assert where.qualname(line) == (fn.qualname if fn else "<module>"), line
