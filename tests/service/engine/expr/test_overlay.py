"""The overlay reads, writes and iterates as ``ChainMap(front, back)`` does, and never
writes to the map it overlays."""

from __future__ import annotations

from collections import ChainMap

import pytest

from service.engine.expr.overlay import Overlay


def test_an_overlay_reads_and_iterates_as_a_chainmap() -> None:
    back = {"a": 1, "b": 2, "c": 3}
    mine, theirs = Overlay(dict(back), {"b": 20, "z": 26}), ChainMap({"b": 20, "z": 26}, back)
    for key in ("a", "b", "z", "missing"):
        assert mine.get(key) == theirs.get(key)
        assert mine.get(key, "d") == theirs.get(key, "d")
        assert (key in mine) == (key in theirs)
    assert list(mine) == list(theirs) and len(mine) == len(theirs)
    assert dict(mine.items()) == dict(theirs.items())
    with pytest.raises(KeyError):
        mine["missing"]


def test_writes_and_deletes_touch_the_front_only() -> None:
    back = {"a": 1}
    view = Overlay(back)
    view["a"] = 10
    view["n"] = 5
    assert view["a"] == 10 and view["n"] == 5 and back == {"a": 1}
    del view["a"]
    assert view["a"] == 1  # the back map shows through again
    with pytest.raises(KeyError):
        del view["a"]  # only the back map holds it: not deletable, as with ChainMap
    assert back == {"a": 1}
