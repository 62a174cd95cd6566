"""A small release tree for tests: some real files of a cached release, and a version."""

from __future__ import annotations

import shutil
from pathlib import Path


def release_tree(dest: Path, version: str, files: dict[str, Path | str]) -> Path:
    """Write ``files`` (package-relative path -> a file to copy, or text) under ``dest``,
    with ``sglang/version.py`` saying ``version``; returns ``dest``."""
    for rel, content in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, dest / rel)
        else:
            (dest / rel).write_text(content)
    (dest / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    return dest
