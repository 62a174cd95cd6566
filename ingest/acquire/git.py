"""Dev builds: the source of the exact commit a version like ``0.5.19.dev410+gedff717ef`` names.

setuptools-scm versions an untagged build as ``<next>.dev<distance>+g<commit>``
(``.d<date>`` appended when the working tree was dirty; those local edits are
not in any repository, so the commit's own source is indexed). With
``TRIAGE_SGLANG_GIT`` set to SGLang's git URL or a local mirror,
:func:`fetch_dev_build`:

1. keeps a bare mirror under ``<home>/git/<hash of the URL>.git`` (created on
   first use);
2. resolves the commit there and, only when it is missing, runs ``git fetch``
   of every branch and tag, then resolves again (an unknown or ambiguous hash is
   an :class:`GitFetchError`);
3. extracts ``python/sglang``'s Python files of that commit (``git archive``)
   into ``<home>/sources/git-<full sha>/sglang``, through a temporary folder
   renamed into place and marked ``.complete``, like a wheel's unpacked tree; a
   complete tree is reused without touching git.

The result is a :class:`kb.sources.ReleaseSource` whose ``version`` is the dev
version string, so ``ingest`` indexes it like a release. git runs without a
terminal prompt (``GIT_TERMINAL_PROMPT=0``) and with a timeout; credentials in a
URL are never written into the KB (the origin names the URL without them).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
from pathlib import Path

from kb.errors import AcquireError, ConfigError
from kb.sources import ReleaseSource

__all__ = [
    "DEV_VERSION",
    "DevBuildNeedsGit",
    "GitFetchError",
    "dev_commit",
    "ensure_commit",
    "extract_commit",
    "fetch_dev_build",
    "mirror_dir",
    "public_url",
]

#: ``0.5.19.dev410+gedff717ef`` (optionally ``.d20250101`` for a dirty tree): group 1 the commit.
DEV_VERSION = re.compile(r"^[0-9][0-9A-Za-z.!]*\.dev[0-9]+\+g([0-9a-f]{7,40})(?:\.d[0-9]{8})?$")
PACKAGE = "python/sglang"
GIT_TIMEOUT_S = 1800


class DevBuildNeedsGit(ConfigError):
    """A dev build's source lives in git, and ``TRIAGE_SGLANG_GIT`` is not set."""


class GitFetchError(AcquireError):
    """git could not fetch the commit, or the commit has no ``python/sglang``."""


def dev_commit(version: str) -> str | None:
    """The abbreviated commit a dev version names, or None for any other version."""
    match = DEV_VERSION.match(version.strip())
    return match.group(1) if match else None


def public_url(url: str) -> str:
    """``url`` without user or password (what may be shown or stored)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def mirror_dir(home: Path, url: str) -> Path:
    """The bare mirror of ``url`` under the cache home (one per URL)."""
    return home / "git" / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}.git"


def _git(*args: str, cwd: Path | None = None, binary: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=not binary,
            env=env,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise GitFetchError("git is not installed; dev builds need it") from exc
    except subprocess.TimeoutExpired as exc:
        raise GitFetchError(f"git {args[0]} timed out after {GIT_TIMEOUT_S} s") from exc


def _err(proc: subprocess.CompletedProcess) -> str:
    text = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    return "\n".join(text.strip().splitlines()[-3:])


def _resolve(mirror: Path, commit: str) -> str | None:
    proc = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", cwd=mirror)
    if proc.returncode == 0:
        return proc.stdout.strip()
    if "ambiguous" in (proc.stderr or ""):
        raise GitFetchError(f"commit {commit} is ambiguous in {mirror}; give more hex digits")
    return None


def ensure_commit(url: str, commit: str, mirror: Path) -> str:
    """The full sha of ``commit`` in ``mirror``, fetching from ``url`` only when it is missing."""
    if url.startswith("-"):
        raise ConfigError(f"TRIAGE_SGLANG_GIT is not a git URL or path: {url!r}")
    if not (mirror / "HEAD").is_file():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        proc = _git("init", "--bare", "--quiet", str(mirror))
        if proc.returncode != 0:
            raise GitFetchError(f"cannot create the git mirror {mirror}: {_err(proc)}")
    found = _resolve(mirror, commit)
    if found:
        return found
    proc = _git(
        "fetch",
        "--quiet",
        "--prune",
        "--tags",
        "--",
        url,
        "+refs/heads/*:refs/heads/*",
        "+refs/tags/*:refs/tags/*",
        cwd=mirror,
    )
    if proc.returncode != 0:
        raise GitFetchError(
            f"git fetch from {public_url(url)} failed: {_err(proc)}",
            details={"url": public_url(url), "commit": commit},
        )
    found = _resolve(mirror, commit)
    if not found:
        raise GitFetchError(
            f"commit {commit} is not on any branch or tag of {public_url(url)}",
            details={"url": public_url(url), "commit": commit},
        )
    return found


def extract_commit(mirror: Path, sha: str, dest: Path) -> Path:
    """``python/sglang``'s Python files of ``sha`` into ``dest/sglang`` (reused when complete)."""
    marker = dest / ".complete"
    if marker.is_file() and marker.read_text() == sha:
        return dest
    proc = _git("archive", "--format=tar", sha, "--", PACKAGE, cwd=mirror, binary=True)
    if proc.returncode != 0:
        raise GitFetchError(
            f"commit {sha[:12]} has no {PACKAGE}: {_err(proc)}", details={"commit": sha}
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    prefix = "python/"
    try:
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            members = []
            for m in tar.getmembers():
                if not (m.isfile() and m.name.startswith(prefix) and m.name.endswith(".py")):
                    continue
                if ".." in Path(m.name).parts:
                    continue
                m.name = m.name[len(prefix) :]
                members.append(m)
            tar.extractall(tmp, members=members, filter="data")
        (tmp / ".complete").write_text(sha)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except (tarfile.TarError, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if marker.is_file() and marker.read_text() == sha:  # another process finished first
            return dest
        raise GitFetchError(f"cannot extract {PACKAGE} of {sha[:12]}: {exc}") from exc
    return dest


def fetch_dev_build(
    version: str, *, git_url: str | None, home: Path, source_dir: Path
) -> ReleaseSource:
    """The source of the commit ``version`` names, as a release called ``version``."""
    commit = dev_commit(version)
    if commit is None:
        raise AcquireError(f"{version!r} is not a dev build version (<x>.dev<n>+g<commit>)")
    if not git_url:
        raise DevBuildNeedsGit(
            f"{version} is a dev build of commit {commit}: set TRIAGE_SGLANG_GIT (setting "
            f"sglang_git) to SGLang's git URL or a local mirror to ingest it",
            details={"version": version, "commit": commit, "setting": "TRIAGE_SGLANG_GIT"},
        )
    mirror = mirror_dir(home, git_url)
    sha = ensure_commit(git_url, commit, mirror)
    root = extract_commit(mirror, sha, source_dir / f"git-{sha}")
    if not (root / "sglang").is_dir():
        raise GitFetchError(f"commit {sha[:12]} has no Python files under {PACKAGE}")
    return ReleaseSource(
        version=version.strip(), root=root, origin=f"git:{public_url(git_url)}@{sha}"
    )
