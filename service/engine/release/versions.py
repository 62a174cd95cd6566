"""SGLang release version strings: parsing, ordering, dev builds and matching ingested releases.

Versions are PEP 440 (:class:`packaging.version.Version`), with a leading
``v`` tolerated; parsing and ordering are :mod:`kb.versions`' (re-exported here). A *dev build* is a ``.devN`` version or one with a git local
label (``0.5.19.dev410+gedff717ef``). :func:`match_release` finds the ingested
release a version string names (``"v0.5.11"``, ``"0.5.11+cu128"``), and
:func:`not_after` lists the ingested releases a dev build may be based on.
Used by :mod:`service.engine.release.resolve` and by anything that sorts releases.
"""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

from kb.versions import parse_version, version_key

__all__ = [
    "after_reported",
    "is_dev",
    "match_release",
    "not_after",
    "parse_version",
    "release_sort_key",
    "tie_break",
]

#: Sort key of a release: PEP 440 order (dev builds before their release), unparsable
#: ones first by text (:func:`kb.versions.version_key`).
release_sort_key = version_key


def is_dev(text: str | None) -> bool:
    """A development snapshot: ``.devN`` or a git local label (``+g1234abc``)."""
    v = parse_version(text) if text else None
    return v is not None and (v.is_devrelease or (v.local or "").startswith("g"))


def match_release(text: str, ingested: Sequence[str]) -> str | None:
    """The ingested release ``text`` names (``"v0.5.11"``, ``"0.5.11+cu128"``), if any."""
    if text in ingested:
        return text
    v = parse_version(text)
    if v is None or is_dev(text):
        return None
    for rel in ingested:
        rv = parse_version(rel)
        if rv is not None and (rv == v or (v.local and rv == Version(v.public))):
            return rel
    return None


def not_after(reported: str | None, ingested: Sequence[str]) -> list[str]:
    """Ingested releases not after ``reported``, closest first (for a dev build: its base)."""
    v = parse_version(reported) if reported else None
    if v is None:
        return []
    older = [r for r in ingested if (rv := parse_version(r)) is not None and rv <= v]
    return sorted(older, key=release_sort_key, reverse=True)


def after_reported(release: str, reported: str | None) -> int:
    """A tie-break: 0 for a release not after the reported version, else 1."""
    v, rv = (parse_version(reported) if reported else None), parse_version(release)
    return 0 if v is not None and rv is not None and rv <= v else 1


def tie_break(tied: list[str], hinted: dict[str, float], reported: str | None) -> str:
    """One of ``tied``: the most strongly hinted (the newest among equals); without a
    hint, the closest not after ``reported``; else the newest."""
    named = [r for r in tied if r in hinted]
    if named:
        return max(named, key=lambda r: (hinted[r], release_sort_key(r)))
    older = not_after(reported, tied)
    return older[0] if older else max(tied, key=release_sort_key)
