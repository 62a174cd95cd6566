"""The OS sandbox every replay child runs in (bubblewrap), and its resource limits.

Replay imports an SGLang release and runs its validation on a command line that
came from a user's log, so the child is treated as hostile:

* **namespaces** (``bwrap --unshare-all``): its own user, PID, network, IPC,
  UTS and cgroup namespaces. No network at all (not even the host's loopback),
  no view of the service's processes (``/proc/<pid>/environ`` of the parent
  does not exist in there), an unprivileged uid (65534) with no capabilities;
* **filesystem**: the host's root read-only, a private ``/tmp``, the service's
  cache folder (KB, records, wheels) hidden behind an empty tmpfs with only the
  release tree and the generated model folders bound back read-only; the only
  writable place is the batch's own work folder;
* **lifetime**: ``--die-with-parent`` and the PID namespace: when the harness
  kills the sandbox (time limit), every process inside dies with it, including
  ``setsid`` children;
* **limits** (``prlimit`` around the sandbox, inherited by everything in it): CPU
  seconds, address space, file size, open files and processes. (``prlimit``
  rather than a ``preexec_fn``: the service forks from a threaded process.)

When ``bwrap`` is missing or cannot create namespaces here, :func:`status`
says so: replay is then off (``/readyz`` reports it) and never falls back to
running unsandboxed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Limits", "SandboxStatus", "command", "status"]

#: The uid and gid the child runs as inside its user namespace ("nobody").
SANDBOX_ID = 65534


@dataclass(frozen=True)
class Limits:
    """Resource limits of one replay batch (applied to the whole sandbox)."""

    cpu_s: int = 600
    address_space_bytes: int = 16 << 30  # torch reserves a few GB of address space on import
    file_size_bytes: int = 256 << 20
    open_files: int = 1024
    processes: int = 256


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    reason: str
    bwrap: str | None = None
    prlimit: str | None = None


@functools.lru_cache(maxsize=1)
def status() -> SandboxStatus:
    """Whether replay can be sandboxed here (``bwrap`` present and able to make namespaces)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return SandboxStatus(False, "bubblewrap (bwrap) is not installed: replay is off "
                                    "(apt-get install bubblewrap)")
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        return SandboxStatus(False, "prlimit (util-linux) is not installed: replay is off", bwrap)
    try:
        probe = subprocess.run(
            [bwrap, "--die-with-parent", "--unshare-all", "--uid", str(SANDBOX_ID), "--gid",
             str(SANDBOX_ID), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"],
            capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus(False, f"bubblewrap cannot run here: {exc}", bwrap)
    if probe.returncode != 0:
        err = probe.stderr.decode(errors="replace").strip()[:300]
        return SandboxStatus(False, f"bubblewrap cannot create namespaces here: {err}", bwrap)
    return SandboxStatus(True, "bubblewrap: user, PID, network, IPC, UTS and cgroup namespaces",
                         bwrap, prlimit)


def interpreter_paths() -> list[Path]:
    """What the child's interpreter needs to see: this Python (prefixes, executable) and every
    folder on its import path (the venv's site-packages, an editable install's source tree)."""
    paths = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
             Path(sys.executable).parent]
    paths += [Path(p) for p in sys.path if p and os.path.isabs(p)]
    return list(dict.fromkeys(paths))


def command(argv: Sequence[str], *, workdir: Path, hidden: Sequence[Path],
            readable: Sequence[Path], limits: Limits | None = None) -> list[str]:
    """``argv`` wrapped in ``prlimit`` and bubblewrap (see the module docstring).

    ``workdir`` is the only writable folder (and the working directory);
    ``/tmp`` and the ``hidden`` folders are covered by an empty tmpfs, after
    which the ``readable`` ones and :func:`interpreter_paths` (a venv may live
    under ``/tmp``) are bound back read-only.
    """
    st = status()
    if not st.available or st.bwrap is None or st.prlimit is None:
        raise RuntimeError(st.reason)
    lim = limits or Limits()
    cmd = [st.prlimit, f"--cpu={lim.cpu_s}", f"--as={lim.address_space_bytes}",
           f"--fsize={lim.file_size_bytes}", f"--nofile={lim.open_files}",
           f"--nproc={lim.processes}", "--",
           st.bwrap, "--die-with-parent", "--new-session", "--unshare-all",
           "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID), "--cap-drop", "ALL",
           "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # mounts apply in order: the interpreter first (it may live under /tmp), then the
    # hidden folders over anything above, then what must stay readable inside them
    for path in interpreter_paths():
        if path.exists():
            cmd += ["--ro-bind", str(path), str(path)]
    for folder in hidden:
        if folder.is_dir():
            cmd += ["--tmpfs", str(folder)]
    for path in readable:
        if path.exists():
            cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir), "--", *argv]
    return cmd
