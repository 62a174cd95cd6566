"""One entry point for any version string a user's log may carry.

:func:`fetch_any` hands a dev build (``0.5.19.dev410+gedff717ef``) to
:mod:`ingest.acquire.git` (the exact commit, from ``TRIAGE_SGLANG_GIT``) and
anything else to :func:`kb.sources.fetch_release` (the PyPI wheel through pip,
cached). Either way the result is a :class:`kb.sources.ReleaseSource` that
:func:`ingest.pipeline.ingest` indexes under that version string.
"""

from __future__ import annotations

from kb.settings import KBSettings
from kb.sources import ReleaseSource, fetch_release

from .git import dev_commit, fetch_dev_build

__all__ = ["fetch_any", "is_dev_build"]


def is_dev_build(version: str) -> bool:
    """True when ``version`` names a git commit (``<x>.dev<n>+g<commit>``)."""
    return dev_commit(version) is not None


def fetch_any(version: str, settings: KBSettings) -> ReleaseSource:
    """The source of ``version``: a dev build's commit from git, else the PyPI release.

    Raises :class:`~ingest.acquire.git.DevBuildNeedsGit` for a dev build when
    ``TRIAGE_SGLANG_GIT`` is unset, and :class:`kb.errors.AcquireError` (or a
    subclass) when the source cannot be fetched.
    """
    if is_dev_build(version):
        return fetch_dev_build(
            version, git_url=settings.sglang_git, home=settings.home, source_dir=settings.source_dir
        )
    return fetch_release(
        version,
        wheel_dir=settings.wheel_dir,
        source_dir=settings.source_dir,
        index_url=settings.pip_index_url,
    )
