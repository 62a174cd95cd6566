"""Which SGLang releases the package index offers, oldest first, and which to skip and why.

The index is the one pip uses (``TRIAGE_PIP_INDEX_URL``, else PyPI's
``https://pypi.org/simple``). :func:`fetch_files` asks for the project page in
the PEP 691 JSON form (``Accept: application/vnd.pypi.simple.v1+json``), which
carries every file with its ``yanked`` flag; an index that answers with the
PEP 503 HTML form instead (``data-yanked`` on each link) is read too, and so is a
``file://`` index folder (``<folder>/sglang/index.html`` or ``index.json``).

:func:`select_releases` groups the files by version (read from each wheel or
sdist file name), keeps the versions at or after ``since``, and sorts them oldest
to newest, so that ingesting them in that order lets each release reuse the rows
of the files its predecessor left unchanged. A version is skipped, with its
reason, when every file of it is yanked (PEP 592: a release is yanked only when all
its files are), and a wheel or sdist whose name carries no valid version is
reported by its file name. Files pip would not fetch (eggs, installers) are ignored. Whether a release actually holds
``sglang/srt/server_args.py`` is only known once it is fetched; the caller
(:mod:`ingest.acquire.batch`) checks that.
"""

from __future__ import annotations

import json
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kb.errors import AcquireError
from kb.versions import version_key

__all__ = [
    "DEFAULT_INDEX",
    "IndexFile",
    "IndexRelease",
    "Listing",
    "Skip",
    "fetch_files",
    "list_releases",
    "parse_html_page",
    "parse_json_page",
    "project_url",
    "select_releases",
]

DEFAULT_INDEX = "https://pypi.org/simple"
PROJECT = "sglang"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
#: JSON first; pip's HTML form as the fallback an older index offers.
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


@dataclass(frozen=True)
class IndexFile:
    """One distribution file of the project page."""

    filename: str
    url: str
    yanked: bool = False
    yanked_reason: str | None = None
    sha256: str | None = None

    @property
    def kind(self) -> str | None:
        """``"wheel"``, ``"sdist"`` or None (eggs, .exe and other formats pip does not fetch)."""
        if self.filename.endswith(".whl"):
            return "wheel"
        if self.filename.endswith((".tar.gz", ".zip")):
            return "sdist"
        return None

    @property
    def version(self) -> str | None:
        """The version in the file name (None when the name is not a valid wheel/sdist name)."""
        try:
            if self.kind == "wheel":
                name, version, _, _ = parse_wheel_filename(self.filename)
            elif self.kind == "sdist":
                name, version = parse_sdist_filename(self.filename)
            else:
                return None
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            return None
        return str(version) if name == PROJECT else None


@dataclass(frozen=True)
class IndexRelease:
    """A version the index offers, with its files."""

    version: str
    files: tuple[IndexFile, ...]

    @property
    def has_wheel(self) -> bool:
        return any(f.kind == "wheel" and not f.yanked for f in self.files)

    @property
    def has_sdist(self) -> bool:
        return any(f.kind == "sdist" and not f.yanked for f in self.files)


@dataclass(frozen=True)
class Skip:
    """A version not ingested, and why (shown in the CLI's table and ``--json``)."""

    version: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"version": self.version, "reason": self.reason}


@dataclass
class Listing:
    """The releases to ingest (oldest first) and the versions skipped before any fetch."""

    releases: list[IndexRelease] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    index_url: str = DEFAULT_INDEX
    page_format: str = "json"  # "json" | "html"

    @property
    def versions(self) -> list[str]:
        return [r.version for r in self.releases]


def project_url(index_url: str | None, project: str = PROJECT) -> str:
    """``<index>/<project>/`` (the simple API's project page)."""
    return f"{(index_url or DEFAULT_INDEX).rstrip('/')}/{project}/"


def _yanked(value: Any) -> tuple[bool, str | None]:
    """PEP 691 ``yanked``: false, true, or a (possibly empty) reason string meaning true."""
    if isinstance(value, str):
        return True, value or None
    return bool(value), None


def parse_json_page(data: dict[str, Any], base_url: str = "") -> list[IndexFile]:
    """The files of a PEP 691 JSON project page (relative URLs resolved against ``base_url``)."""
    files = data.get("files")
    if not isinstance(files, list):
        raise AcquireError("the index's JSON project page has no 'files' list")
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
            continue
        yanked, reason = _yanked(f.get("yanked", False))
        hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
        out.append(
            IndexFile(
                f["filename"],
                urllib.parse.urljoin(base_url, str(f.get("url", ""))),
                yanked,
                reason,
                hashes.get("sha256"),
            )
        )
    return out


class _Links(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__()
        self.base_url, self.files, self._attrs = base_url, [], None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._attrs, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._attrs is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag != "a" or self._attrs is None:
            return
        attrs, self._attrs = self._attrs, None
        href = attrs.get("href") or ""
        url, _, fragment = href.partition("#")
        name = "".join(self._text).strip() or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        yanked = "data-yanked" in attrs
        self.files.append(
            IndexFile(
                name,
                urllib.parse.urljoin(self.base_url, url),
                yanked,
                (attrs.get("data-yanked") or None) if yanked else None,
                sha,
            )
        )


def parse_html_page(text: str, base_url: str = "") -> list[IndexFile]:
    """The files of a PEP 503 HTML project page (``data-yanked`` marks a yanked file)."""
    parser = _Links(base_url)
    parser.feed(text)
    return parser.files


def fetch_files(
    index_url: str | None = None, *, timeout: float = 30.0
) -> tuple[list[IndexFile], str]:
    """The project page's files and its format (``"json"`` or ``"html"``).

    ``http(s)://`` indexes are asked for JSON and read as HTML if they answer
    so; a ``file://`` index is a folder holding ``sglang/index.json`` or
    ``sglang/index.html``. Unreachable indexes raise :class:`AcquireError`.
    """
    url = project_url(index_url)
    if url.startswith("file://"):
        folder = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
        if (folder / "index.json").is_file():
            return parse_json_page(json.loads((folder / "index.json").read_text()), url), "json"
        if (folder / "index.html").is_file():
            return parse_html_page((folder / "index.html").read_text(), url), "html"
        raise AcquireError(f"no index.json or index.html in the local index folder {folder}")
    try:
        resp = httpx.get(url, headers={"Accept": ACCEPT}, timeout=timeout, follow_redirects=True)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise AcquireError(f"cannot list sglang releases from {url}: {exc}") from exc
    ctype = resp.headers.get("content-type", "").split(";")[0].strip()
    if ctype == JSON_TYPE or ctype.endswith("json"):
        try:
            return parse_json_page(resp.json(), str(resp.url)), "json"
        except ValueError as exc:
            raise AcquireError(f"the index at {url} sent malformed JSON: {exc}") from exc
    return parse_html_page(resp.text, str(resp.url)), "html"


def select_releases(
    files: list[IndexFile], *, since: str | None = None, include_pre: bool = True
) -> Listing:
    """Group ``files`` by version and pick what to ingest: at or after ``since``, oldest first.

    Versions before ``since`` are left out silently (not asked for); the others
    that cannot be ingested are in :attr:`Listing.skipped` with their reason.
    ``include_pre=False`` also leaves out pre-releases (``0.5.2rc0``) silently.
    """
    try:
        floor = Version(since) if since else None
    except InvalidVersion as exc:
        raise AcquireError(f"--since {since!r} is not a version") from exc
    by_version: dict[str, list[IndexFile]] = defaultdict(list)
    skipped: list[Skip] = []
    for f in files:
        version = f.version
        if version is None:
            if f.kind is not None:
                skipped.append(Skip(f.filename, "file name carries no valid sglang version"))
            continue
        by_version[version].append(f)
    releases = []
    for version, group in sorted(by_version.items(), key=lambda kv: version_key(kv[0])):
        parsed = Version(version)
        if (floor is not None and parsed < floor) or (parsed.is_prerelease and not include_pre):
            continue
        rel = IndexRelease(version, tuple(group))
        if all(f.yanked for f in group):
            reasons = sorted({f.yanked_reason for f in group if f.yanked_reason})
            skipped.append(Skip(version, "yanked" + (f": {'; '.join(reasons)}" if reasons else "")))
        else:
            releases.append(rel)
    return Listing(releases, skipped)


def list_releases(
    index_url: str | None = None, *, since: str | None = None, include_pre: bool = True
) -> Listing:
    """:func:`fetch_files` then :func:`select_releases`: what ``ingest --all`` works through."""
    files, page_format = fetch_files(index_url)
    listing = select_releases(files, since=since, include_pre=include_pre)
    listing.index_url, listing.page_format = project_url(index_url), page_format
    return listing
