"""The index's release list, kept for a while: which versions may be fetched on demand.

On-demand ingest (:mod:`service.ondemand`) fetches only a version the package index
lists: a log naming ``0.5.999`` or ``1.0.0rc7`` must not start a ``pip download``.
:class:`ReleaseList` asks the index for its project page
(:func:`~ingest.acquire.pypi_index.fetch_files`, PEP 691 JSON with the HTML fallback)
at most once per ``ttl_s`` and keeps the versions it offers (every version with a file
that is not yanked, pre-releases included) in memory and in a small JSON file, so that
a restarted server does not ask again either. A listing that failed is not asked for
again for :data:`RETRY_LISTING_S` (or ``ttl_s`` when shorter): a burst of requests
while the index is down costs one request to it, and an older listing, when there is
one, is used meanwhile.

Only the list is cached here; the wheels are pip's and :mod:`kb.sources`' business.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from kb.errors import AcquireError
from kb.versions import sorted_versions

from .pypi_index import IndexFile, fetch_files, project_url, select_releases

__all__ = [
    "LISTING_TIMEOUT_S",
    "RETRY_LISTING_S",
    "Offered",
    "ReleaseList",
    "normalize",
    "not_offered",
    "release_list_for",
]

#: A listing that failed is asked for again after this long at the earliest.
RETRY_LISTING_S = 60.0
#: Seconds one listing may take before it counts as failed.
LISTING_TIMEOUT_S = 20.0


def normalize(version: str) -> str | None:
    """``version`` as the index spells it (PEP 440 normal form), None when it is no version."""
    try:
        return str(Version(version.strip()))
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class Offered:
    """The versions one index offers, and when they were listed (``time.time()``)."""

    index_url: str
    versions: frozenset[str]
    listed_at: float

    def nearest(self, version: str) -> str | None:
        """The newest offered version at or before ``version`` (else the oldest after it)."""
        try:
            wanted = Version(version)
        except InvalidVersion:
            return None
        ordered = sorted_versions(self.versions)
        before = [v for v in ordered if Version(v) <= wanted]
        return before[-1] if before else (ordered[0] if ordered else None)


class ReleaseList:
    """The versions the index offers, listed at most once per ``ttl_s`` (thread-safe).

    ``cache_file`` (optional) keeps the last listing on disk with its time, so other
    processes and a restarted one reuse it while it is fresh. ``fetch`` lists the
    project page's files (tests and the bench may pass their own); :attr:`fetches`
    counts the times the index was asked.
    """

    def __init__(
        self,
        index_url: str | None,
        *,
        ttl_s: float,
        cache_file: Path | None = None,
        fetch: Callable[[str | None], tuple[list[IndexFile], str]] | None = None,
    ) -> None:
        self.index_url = project_url(index_url)
        self._index = index_url
        self.ttl_s = max(0.0, ttl_s)
        self.cache_file = cache_file
        self._fetch = fetch or (lambda url: fetch_files(url, timeout=LISTING_TIMEOUT_S))
        self._lock = threading.Lock()  # guards the fields below
        self._fetching = threading.Lock()  # one listing at a time
        self._offered: Offered | None = None
        self._failed: tuple[float, str] | None = None  # (monotonic time, why)
        self.fetches = 0

    def offered(self) -> Offered:
        """The fresh listing (from memory, the cache file, or the index, in that order).

        One caller lists at a time; while it does, the others get the previous listing
        if there is one (however old), else wait for it. When the index cannot be listed,
        the previous listing is used if there is one; else :class:`~kb.errors.AcquireError`
        is raised (and raised again, without asking, until :data:`RETRY_LISTING_S` passed).
        """
        stale = self._fresh()
        if stale is not None and time.time() - stale.listed_at < self.ttl_s:
            return stale
        got = (
            self._fetching.acquire(timeout=LISTING_TIMEOUT_S + 5)
            if stale is None
            else self._fetching.acquire(blocking=False)
        )
        if not got:
            if stale is not None:
                return stale
            raise AcquireError(
                "the release list is still being read from the index; try again in a moment"
            )
        try:
            again = self._fresh()
            if again is not None and time.time() - again.listed_at < self.ttl_s:
                return again
            with self._lock:
                failed = self._failed
            if failed and time.monotonic() - failed[0] < min(RETRY_LISTING_S, self.ttl_s or 1.0):
                if stale is not None:  # the index is down: an old list beats none
                    return stale
                raise AcquireError(failed[1])
            self.fetches += 1
            try:
                files, _ = self._fetch(self._index)
                listing = select_releases(files)
            except Exception as exc:  # httpx, a malformed page: never the caller's 500
                why = (
                    exc.message
                    if isinstance(exc, AcquireError)
                    else f"cannot list releases from {self.index_url}: {type(exc).__name__}: {exc}"
                )
                with self._lock:
                    self._failed = (time.monotonic(), why[:500])
                if stale is not None:
                    return stale
                raise AcquireError(why[:500]) from exc
            versions = frozenset(v for v in (normalize(r.version) for r in listing.releases) if v)
            offered = Offered(self.index_url, versions, time.time())
            with self._lock:
                self._offered, self._failed = offered, None
            self._write_cache(offered)
            return offered
        finally:
            self._fetching.release()

    def _fresh(self) -> Offered | None:
        """The newest listing known (memory, else the cache file), fresh or not."""
        with self._lock:
            mine = self._offered
        disk = (
            self._read_cache()
            if mine is None or time.time() - mine.listed_at >= self.ttl_s
            else None
        )
        best = max(
            (o for o in (mine, disk) if o is not None), key=lambda o: o.listed_at, default=None
        )
        if best is not None and best is disk:
            with self._lock:
                self._offered = best
        return best

    def _read_cache(self) -> Offered | None:
        if self.cache_file is None or not self.cache_file.is_file():
            return None
        try:
            data = json.loads(self.cache_file.read_text())
            if data.get("index_url") != self.index_url:
                return None
            return Offered(
                self.index_url,
                frozenset(str(v) for v in data["versions"]),
                float(data["listed_at"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a damaged cache file is listed again

    def _write_cache(self, offered: Offered) -> None:
        if self.cache_file is None:
            return
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".releases-", dir=self.cache_file.parent)
            with os.fdopen(fd, "w") as fh:
                json.dump(
                    {
                        "index_url": offered.index_url,
                        "listed_at": offered.listed_at,
                        "versions": sorted_versions(offered.versions),
                    },
                    fh,
                )
            os.replace(tmp, self.cache_file)
        except OSError:
            pass  # the memory copy still holds; a read-only home only costs more listings


_LISTS: dict[tuple[str | None, float, str], ReleaseList] = {}
_LISTS_LOCK = threading.Lock()


def release_list_for(index_url: str | None, *, ttl_s: float, cache_file: Path) -> ReleaseList:
    """The process-wide :class:`ReleaseList` of an index (one per index, TTL and file)."""
    key = (index_url, ttl_s, str(cache_file))
    with _LISTS_LOCK:
        found = _LISTS.get(key)
        if found is None:
            if len(_LISTS) >= 16:
                _LISTS.clear()
            found = _LISTS[key] = ReleaseList(index_url, ttl_s=ttl_s, cache_file=cache_file)
        return found


def not_offered(version: str, releases: ReleaseList, *, git_url: str | None) -> str | None:
    """Why ``version`` must not be fetched, or None when it may be.

    A dev build (``0.5.19.dev410+g…``) may be fetched from git when ``git_url`` is set; any
    other version only when the index lists it. Asks the index at most once per TTL and
    never runs pip.
    """
    from .fetch import is_dev_build

    if is_dev_build(version):
        return (
            None
            if git_url
            else (
                f"{version} is a dev build: its source is a git commit and TRIAGE_SGLANG_GIT is "
                "not set, so nothing was fetched"
            )
        )
    try:
        offered = releases.offered()
    except AcquireError as exc:
        return (
            f"the package index's release list could not be read ({exc.message}); "
            "nothing was fetched"
        )
    if normalize(version) in offered.versions:
        return None
    nearest = offered.nearest(version)
    return (
        f"{version} is not a release on the package index ({len(offered.versions)} listed"
        + (f"; the nearest is {nearest}" if nearest else "")
        + "), so nothing was fetched"
    )
