"""Listing SGLang releases: the real index, and recorded pages with yanked and odd files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from ingest.acquire.pypi_index import (
    IndexFile,
    list_releases,
    parse_html_page,
    parse_json_page,
    select_releases,
)
from kb.errors import AcquireError
from service.settings import Settings


def _file(name: str, yanked: bool | str = False) -> dict:
    return {
        "filename": name,
        "url": f"../../packages/{name}",
        "hashes": {"sha256": "0" * 64},
        "requires-python": ">=3.10",
        "yanked": yanked,
    }


#: A PEP 691 page as an index serves it: 0.5.1 fully yanked (with a reason), 0.5.2's wheel
#: yanked but its sdist not, a pre-release, 0.5.10 after 0.5.9 (numeric order), a file
#: name without a version, and an egg pip would never fetch.
PAGE = {
    "meta": {"api-version": "1.1"},
    "name": "sglang",
    "files": [
        _file("sglang-0.4.0-py3-none-any.whl"),
        _file("sglang-0.5.1-py3-none-any.whl", "broken build"),
        _file("sglang-0.5.1.tar.gz", True),
        _file("sglang-0.5.10-cp311-cp311-manylinux_2_34_x86_64.whl"),
        _file("sglang-0.5.2-py3-none-any.whl", True),
        _file("sglang-0.5.2.tar.gz"),
        _file("sglang-0.5.3rc0-py3-none-any.whl"),
        _file("sglang-0.5.9-py3-none-any.whl"),
        _file("sglang-0.5.9.tar.gz"),
        _file("sglang-latest.tar.gz"),
        _file("sglang-0.5.4-py3.11.egg"),
    ],
    "versions": ["0.4.0", "0.5.1", "0.5.2", "0.5.3rc0", "0.5.4", "0.5.9", "0.5.10"],
}


def test_real_index_lists_recent_releases_oldest_first() -> None:
    settings = Settings()
    listing = list_releases(settings.pip_index_url, since="0.5.22")
    assert listing.versions[:2] == ["0.5.22", "0.5.23"]
    assert listing.versions == sorted(listing.versions, key=Version)
    assert all(Version(v) >= Version("0.5.22") for v in listing.versions)
    assert all(r.has_wheel for r in listing.releases)
    if settings.pip_index_url is None:
        assert listing.page_format == "json"
        assert listing.index_url == "https://pypi.org/simple/sglang/"


def test_recorded_page_skips_yanked_and_orders_by_version() -> None:
    files = parse_json_page(PAGE, "https://example.test/simple/sglang/")
    assert files[0].url == "https://example.test/packages/sglang-0.4.0-py3-none-any.whl"
    assert files[1].yanked and files[1].yanked_reason == "broken build"
    assert files[2].yanked and files[2].yanked_reason is None

    listing = select_releases(files, since="0.5.0")
    assert listing.versions == ["0.5.2", "0.5.3rc0", "0.5.9", "0.5.10"]
    assert {s.version: s.reason for s in listing.skipped} == {
        "0.5.1": "yanked: broken build",
        "sglang-latest.tar.gz": "file name carries no valid sglang version",
    }
    only_sdist = listing.releases[0]
    assert (only_sdist.has_wheel, only_sdist.has_sdist) == (False, True)

    assert select_releases(files, since="0.5.0", include_pre=False).versions == [
        "0.5.2",
        "0.5.9",
        "0.5.10",
    ]
    assert select_releases(files).versions[0] == "0.4.0"
    with pytest.raises(AcquireError, match="not a version"):
        select_releases(files, since="five")


def test_local_index_folder_json_and_html_fallback(tmp_path: Path) -> None:
    json_index = tmp_path / "json"
    (json_index / "sglang").mkdir(parents=True)
    (json_index / "sglang" / "index.json").write_text(json.dumps(PAGE))
    listing = list_releases(json_index.as_uri(), since="0.5.9")
    assert (listing.page_format, listing.versions) == ("json", ["0.5.9", "0.5.10"])

    html_index = tmp_path / "html"
    (html_index / "sglang").mkdir(parents=True)
    (html_index / "sglang" / "index.html").write_text(
        "<!DOCTYPE html><html><body>"
        '<a href="../../p/sglang-0.5.8-py3-none-any.whl#sha256=ab" data-yanked="">'
        "sglang-0.5.8-py3-none-any.whl</a>"
        '<a href="../../p/sglang-0.5.9-py3-none-any.whl#sha256=cd" '
        'data-requires-python="&gt;=3.10">sglang-0.5.9-py3-none-any.whl</a>'
        "</body></html>"
    )
    listing = list_releases(html_index.as_uri())
    assert (listing.page_format, listing.versions) == ("html", ["0.5.9"])
    assert [s.as_dict() for s in listing.skipped] == [{"version": "0.5.8", "reason": "yanked"}]

    files = parse_html_page(
        '<a href="x/sglang-0.5.9.tar.gz" data-yanked="bad tag">sglang-0.5.9.tar.gz</a>',
        "https://i.test/simple/sglang/",
    )
    assert files == [
        IndexFile(
            "sglang-0.5.9.tar.gz",
            "https://i.test/simple/sglang/x/sglang-0.5.9.tar.gz",
            True,
            "bad tag",
            None,
        )
    ]

    with pytest.raises(AcquireError, match="no index.json or index.html"):
        list_releases((tmp_path / "empty").as_uri())
