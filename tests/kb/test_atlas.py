"""The atlas store (:mod:`kb.atlas`): releases share file contents, a release is stored
whole, deleting one keeps what another release still holds."""

from __future__ import annotations

from pathlib import Path

from kb.atlas import ATLAS_FILE, Atlas, AtlasFunction, AtlasRaise, FileFacts, line_hash


def _facts(blob: str, lines: list[str]) -> FileFacts:
    return FileFacts(
        blob=blob,
        line_hashes=tuple(line_hash(s) for s in lines),
        functions=(AtlasFunction("f", "C.f", 1, len(lines)),),
        raises=(AtlasRaise(2, 2, "ValueError", '"bad value"'),),
    )


def test_releases_share_contents_and_deleting_one_keeps_the_others(tmp_path: Path) -> None:
    atlas = Atlas(tmp_path / ATLAS_FILE)
    a, b = _facts("a" * 64, ["def f():", "  raise X"]), _facts("b" * 64, ["x = 1"])
    atlas.add_release("0.1", "test", {"p/one.py": a.blob, "p/two.py": b.blob}, [a, b])
    before = atlas.stamp()
    atlas.add_release("0.2", "test", {"p/one.py": a.blob}, [])  # nothing new to store
    assert atlas.stamp() != before
    assert sorted(atlas.releases()) == ["0.1", "0.2"]
    assert atlas.blobs_of("p/one.py") == {a.blob: ["0.1", "0.2"]}
    got = atlas.facts(a.blob)
    assert got == a and got.line(2) == line_hash("raise X") and got.line(3) is None
    assert [f.qualname for f in got.enclosing(2)] == ["C.f"]
    assert atlas.messages() == [('"bad value"', "ValueError")]
    assert sorted(atlas.raised_at('"bad value"', "ValueError")) == [
        ("0.1", "p/one.py", 2, 2),
        ("0.1", "p/two.py", 2, 2),
        ("0.2", "p/one.py", 2, 2),
    ]
    atlas.delete_release("0.1")
    assert atlas.releases() == ["0.2"] and atlas.known_blobs() == {a.blob}
    assert Atlas.beside(tmp_path / "index.sqlite") is not None
    assert Atlas.beside(tmp_path / "elsewhere" / "index.sqlite") is None


def test_a_reader_opens_the_file_read_only(tmp_path: Path) -> None:
    writer = Atlas(tmp_path / ATLAS_FILE)
    f = _facts("c" * 64, ["pass"])
    writer.add_release("1.0", "test", {"m.py": f.blob}, [f])
    reader = Atlas.beside(tmp_path / "index.sqlite")
    assert reader is not None and reader.releases() == ["1.0"]
    assert not list(tmp_path.glob("index.sqlite*"))  # looking for the atlas creates nothing
