"""The source tree a replay runs: the whole wheel, not only its ``.py`` files.

:func:`~kb.sources.fetch_release` unpacks only the
``sglang/`` package's Python files, which is all ingest needs. Importing the
release needs more: ``sglang.jit_kernel.utils`` refuses to import unless its
``include/`` and ``csrc/`` folders exist, MoE and quantization code reads JSON
configs next to the modules, and 0.5.23 ships compiled Rust extensions.
:func:`replay_tree` therefore extracts the complete wheel (once, atomically)
into ``<home>/replay-trees/<version>/`` when ``release_root`` is such a
Python-only tree, and returns it; a checkout or ``site-packages`` folder is
used as it is. File paths and line numbers are the same in both trees.
"""

from __future__ import annotations

import os
from pathlib import Path

from kb.errors import AcquireError
from kb.sources import unpack_wheel
from service.replay.errors import ReplayError

__all__ = ["replay_tree"]


def _wheel_for(release_root: Path, wheel_dir: Path) -> Path | None:
    marker = release_root / ".complete"
    if not marker.is_file():
        return None
    name = marker.read_text().strip()
    wheel = wheel_dir / name
    return wheel if name.endswith(".whl") and wheel.is_file() else None


def _extract(wheel: Path, dest: Path) -> Path:
    """The whole ``sglang/`` package (JSON configs, jit kernels' sources too)."""
    try:
        return unpack_wheel(wheel, dest, keep=lambda name: name.startswith("sglang/"))
    except AcquireError as exc:
        raise ReplayError(f"cannot extract {wheel.name} for replay: {exc.message}") from exc


def _readable(tree: Path) -> Path:
    """Make ``tree`` readable by the sandbox user (host uid 65534 when the service is root):
    folders 0755, files ``o+r``; done once per tree (``.replay-readable`` marks it)."""
    marker = tree / ".replay-readable"
    if marker.exists() or not os.access(tree, os.W_OK):
        return tree
    for folder, _dirs, files in os.walk(tree):
        os.chmod(folder, os.stat(folder).st_mode | 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)
    marker.write_text("")
    return tree


def replay_tree(
    release_root: Path, version: str, *, home: Path, wheel_dir: Path
) -> tuple[Path, str]:
    """(folder holding ``sglang/`` to put on ``sys.path``, a note on where it came from),
    readable by the sandbox user."""
    if not (release_root / "sglang" / "__init__.py").is_file():
        raise ReplayError(
            f"no sglang package under {release_root}", details={"release_root": str(release_root)}
        )
    wheel = _wheel_for(release_root, wheel_dir)
    if wheel is None:
        _readable(release_root)
        if (release_root / ".complete").is_file():
            return release_root, (
                "the wheel of this Python-only tree is not cached; resources "
                "(jit_kernel headers, JSON configs, extensions) are missing"
            )
        return release_root, "the release tree as given"
    safe = "".join(c if c.isalnum() or c in ".+-_" else "_" for c in version)[:64]
    return _readable(_extract(wheel, home / "replay-trees" / safe)), f"full wheel {wheel.name}"
