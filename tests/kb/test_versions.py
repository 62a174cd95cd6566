"""kb.versions: the one release order (PEP 440), shared by every part that sorts versions."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kb.store import Store
from kb.versions import parse_version, sorted_versions, version_key

#: Oldest first, each strictly before the next.
ORDERED = [
    "0.4.9",
    "0.5.0.dev3",
    "0.5.0rc1",
    "0.5.0",
    "0.5.0+cu128",
    "0.5.0.post1",
    "0.5.9",
    "0.5.10",
    "0.5.19.dev410",
    "0.5.19.dev410+gedff717ef",
    "0.5.19",
]


def test_versions_sort_in_release_order_not_as_text() -> None:
    shuffled = ORDERED[:]
    random.Random(7).shuffle(shuffled)
    assert sorted_versions(shuffled) == ORDERED
    assert sorted_versions(shuffled, reverse=True) == ORDERED[::-1]
    assert sorted(["0.5.9", "0.5.10"]) == ["0.5.10", "0.5.9"]  # text order, which this fixes
    assert sorted_versions(["0.5.9", "0.5.10"]) == ["0.5.9", "0.5.10"]


def test_each_version_is_strictly_before_the_next() -> None:
    for older, newer in zip(ORDERED, ORDERED[1:], strict=False):
        assert version_key(older) < version_key(newer), (older, newer)


def test_a_release_candidate_comes_between_the_previous_release_and_its_own() -> None:
    assert version_key("0.4.9") < version_key("0.5.0rc1") < version_key("0.5.0")
    assert version_key("0.5.0") < version_key("0.5.0.post1") < version_key("0.5.10")


def test_a_dev_build_comes_before_its_release_and_after_the_previous_one() -> None:
    dev = "0.5.19.dev410+gedff717ef"
    assert version_key("0.5.18") < version_key(dev) < version_key("0.5.19")
    assert version_key("0.5.19.dev410") < version_key(dev)  # the git label after the public part


def test_spellings_of_one_version_have_one_key() -> None:
    assert version_key("v0.5.11") == version_key("0.5.11") == version_key(" 0.5.11\n")
    assert version_key("0.5.11") == version_key("0.5.11.0")  # PEP 440: trailing zeros


def test_strings_that_are_not_versions_sort_first_by_text() -> None:
    assert sorted_versions(["0.5.10", "nightly", "0.4.0", "latest"]) == [
        "latest",
        "nightly",
        "0.4.0",
        "0.5.10",
    ]


def test_parse_version_reads_pep_440_or_says_none() -> None:
    v = parse_version("v0.5.19.dev410+gedff717ef")
    assert v is not None
    assert (v.release, v.dev, v.local) == ((0, 5, 19), 410, "gedff717ef")
    rc = parse_version("0.5.0rc1")
    assert rc is not None and rc.pre == ("rc", 1)
    assert parse_version("not a version") is None
    assert parse_version("") is None


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 12),
            st.integers(0, 12),
            st.sampled_from(["", "rc1", "rc2", ".post1", ".dev5", "+gabc123"]),
        ),
        max_size=12,
    )
)
def test_sorting_is_numeric_on_every_part(parts: list[tuple[int, int, int, str]]) -> None:
    texts = [f"{a}.{b}.{c}{tail}" for a, b, c, tail in parts]
    got = sorted_versions(texts)
    parsed = [parse_version(t) for t in got]
    numbers = [v.release for v in parsed if v is not None]
    assert len(numbers) == len(got)
    assert numbers == sorted(numbers)


def test_the_store_lists_releases_in_release_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "index.sqlite")
    for version in ("0.5.10", "0.5.9", "0.5.0rc1", "0.5.0", "0.4.9"):
        store.replace_release(
            version, {"version": version, "origin": "test", "status": "indexed"}, {}
        )
    assert [r["version"] for r in store.releases()] == [
        "0.4.9",
        "0.5.0rc1",
        "0.5.0",
        "0.5.9",
        "0.5.10",
    ]
