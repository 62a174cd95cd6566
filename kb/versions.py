"""SGLang version strings in release order: the one sort key every part of sglang-triage shares.

Versions are PEP 440 (:class:`packaging.version.Version`), with surrounding
whitespace and a leading ``v`` tolerated, so releases sort numerically
(``0.5.9 < 0.5.10``, never as text) and builds around a release sort where PEP 440
puts them::

    0.5.0.dev3 < 0.5.0rc1 < 0.5.0 < 0.5.0+cu128 < 0.5.0.post1 < 0.5.1.dev410+gedff717ef < 0.5.1

A dev build (``.devN``, with or without a git ``+g<sha>`` local label) comes before
the release it leads to; a local label sorts just after its public version. A string
that is not a version at all sorts before every version, those among themselves by
text, so a sorted list always ends with the newest real release.
"""

from __future__ import annotations

from collections.abc import Iterable

from packaging.version import InvalidVersion, Version

__all__ = ["VersionKey", "parse_version", "sorted_versions", "version_key"]

#: The sort key of a version string: (1, version, "") for a version, (0, 0, text) otherwise.
VersionKey = tuple[int, Version, str]

_NOT_A_VERSION = Version("0")


def parse_version(text: str) -> Version | None:
    """``text`` as a PEP 440 version (surrounding whitespace and a leading ``v`` dropped), or
    None when it is not one."""
    try:
        return Version(text.strip().removeprefix("v"))
    except InvalidVersion:
        return None


def version_key(text: str) -> VersionKey:
    """The sort key of ``text``: PEP 440 order (pre-releases and dev builds before their
    release, post-releases after it, a local label just after its public version); strings
    that are not versions first, by text."""
    v = parse_version(text)
    return (1, v, "") if v is not None else (0, _NOT_A_VERSION, text)


def sorted_versions(versions: Iterable[str], *, reverse: bool = False) -> list[str]:
    """``versions`` oldest first (newest first with ``reverse``), by :func:`version_key`."""
    return sorted(versions, key=version_key, reverse=reverse)
