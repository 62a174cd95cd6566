"""``uv pip install`` into this venv, configured as pip is here (the Makefile's installs).

Run with the venv's Python: ``python scripts/uv_install.py -c constraints.txt ARGS...``.
pip's index, extra indexes, find-links, global constraint files and CA bundle, as
``pip config list`` reports them (``PIP_*`` variables over the ``[install]`` section over
``[global]``), become uv's flags at run time, so the Makefile works however pip is set up.
``--index-strategy unsafe-best-match`` keeps pip's rule (the best version across every
index, not the first index that has the name); ``--compile-bytecode`` writes the ``.pyc``
files pip writes (the replay sandbox imports the venv read-only and could not write them).
Exits non-zero when the venv has no uv, or uv fails: the Makefile then installs with pip.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

#: pip option -> uv flag (an option holding several values repeats the flag)
FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "cert": "--cert",
}
TRUE = {"1", "true", "yes", "on"}


def pip_config() -> dict[str, str]:
    """``{option: value}`` from ``pip config list``, the most specific setting winning."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rank = {"global": 0, "install": 1, ":env:": 2}
    found: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        key, sep, raw = line.partition("=")
        section, _, option = key.rpartition(".")
        if sep and section in rank and rank[section] >= found.get(option, (-1, ""))[0]:
            found[option] = (rank[section], str(ast.literal_eval(raw)))
    return {option: value for option, (_, value) in found.items()}


def uv_flags(config: dict[str, str]) -> list[str]:
    """uv's flags for pip's configuration."""
    args = ["--index-strategy", "unsafe-best-match"]
    for option, flag in FLAGS.items():
        for value in config.get(option, "").split():
            args += [flag, value]
    if config.get("no-index", "").lower() in TRUE:
        args.append("--no-index")
    return args


def main() -> int:
    """Run uv; its exit status, or 1 when this venv has no uv."""
    uv = Path(sys.executable).parent / "uv"
    if not os.access(uv, os.X_OK):
        print(f"no {uv}: installing with pip", file=sys.stderr)
        return 1
    try:
        flags = uv_flags(pip_config())
    except (subprocess.CalledProcessError, ValueError, SyntaxError) as exc:
        print(f"pip's configuration unreadable ({exc}): installing with pip", file=sys.stderr)
        return 1
    cmd = [str(uv), "pip", "install", "--quiet", "--python", sys.executable]
    status = subprocess.run([*cmd, "--compile-bytecode", *flags, *sys.argv[1:]]).returncode
    if status:
        print(f"uv failed ({status}): installing with pip", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
