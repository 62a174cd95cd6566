"""Building the atlas from a release (:mod:`ingest.atlas`): what it keeps of a file, and a
real release read from its package folder and from its wheel alike."""

from __future__ import annotations

import ast
from pathlib import Path

from ingest.atlas import atlas_release, file_facts, fill_atlas
from kb.atlas import ATLAS_FILE, Atlas, line_hash
from kb.sources import find_wheel

SOURCE = b"""class A:
    @staticmethod
    def check(x):
        assert x > 0, f"x must be positive, got {x}"
        err = ValueError("late " + str(x))
        if x:
            raise err
        raise RuntimeError

def bare(y):
    assert y
"""


def test_a_file_keeps_its_lines_functions_and_raises() -> None:
    facts = file_facts(SOURCE)
    lines = SOURCE.decode().split("\n")[:-1]
    assert facts.line_hashes == tuple(line_hash(s) for s in lines)
    assert [(f.qualname, f.start, f.end) for f in facts.functions] == [
        ("A.check", 2, 8),
        ("bare", 10, 11),
    ]
    assert [(r.line, r.exc_type, r.message) for r in facts.raises] == [
        (4, "AssertionError", 'f"x must be positive, got {x}"'),
        (5, "ValueError", '"late " + str(x)'),  # built into a variable, raised later
        (8, "RuntimeError", None),
        (11, "AssertionError", None),
    ]


def test_a_file_python_cannot_parse_keeps_its_lines() -> None:
    facts = file_facts(b"def broken(:\n    pass\n")
    assert len(facts.line_hashes) == 2 and facts.functions == () and facts.raises == ()


def test_a_release_from_its_folder_and_its_wheel_is_the_same(
    tmp_path: Path, sglang_source, cache_settings
) -> None:
    src = sglang_source("0.5.9")
    folder, wheel = Atlas(tmp_path / "a" / ATLAS_FILE), Atlas(tmp_path / "b" / ATLAS_FILE)
    new = atlas_release(folder, "0.5.9", src.package_dir)
    assert new > 100
    whl = find_wheel(cache_settings.wheel_dir, "0.5.9")
    assert whl is not None
    atlas_release(wheel, "0.5.9", whl)
    sa = "sglang/srt/server_args.py"
    assert folder.blobs_of(sa) == wheel.blobs_of(sa)
    (blob,) = folder.blobs_of(sa)
    facts = folder.facts(blob)
    text = (src.package_dir / "srt" / "server_args.py").read_text()
    post = next(
        n
        for c in ast.parse(text).body
        if isinstance(c, ast.ClassDef) and c.name == "ServerArgs"
        for n in c.body
        if isinstance(n, ast.FunctionDef) and n.name == "__post_init__"
    )
    assert any(f.qualname == "ServerArgs.__post_init__" for f in facts.enclosing(post.lineno + 1))
    assert facts.line(post.lineno) == line_hash(text.splitlines()[post.lineno - 1])
    # a second release sharing every file stores nothing new
    assert atlas_release(folder, "0.5.9-copy", src.package_dir) == 0
    # and filling it again from the cache adds nothing and deletes no cached wheel
    done = fill_atlas(wheel, cache_settings, ["0.5.9"])
    assert done.present == ["0.5.9"] and find_wheel(cache_settings.wheel_dir, "0.5.9") == whl
