"""The OS sandbox every replay child runs in (bubblewrap), and its resource limits.

Replay imports an SGLang release and runs its validation on a command line that
came from a user's log, so the child is treated as hostile:

* **namespaces**: its own PID, network, IPC, UTS and cgroup namespaces. No network
  at all (not even the host's loopback), no view of the service's processes
  (``/proc/<pid>/environ`` of the parent does not exist in there);
* **an unprivileged host user**: the child is host uid/gid 65534 ("nobody") with no
  capabilities, no supplementary groups and ``no_new_privs``. When the service runs
  as root, bubblewrap makes no user namespace (in one, the child's uid would map to
  host root, which owns the host's files) and ``setpriv`` drops to 65534 inside the
  sandbox (:data:`PRIVILEGED`); as any other user, bubblewrap's user namespace maps
  65534 to that unprivileged user. Either way a root-only (0600) file of the host is
  unreadable in there;
* **filesystem**: the host's root read-only, a private ``/tmp``, the service's
  cache folder (KB, records, wheels) hidden behind an empty tmpfs with only the
  release tree and the generated model folders bound back read-only; an ancestor
  folder the sandbox user may not enter (``/root``, mode 700) is covered by an empty
  tmpfs first, and what is needed under it bound back; the only writable place is
  the batch's (or the warm job's) own work folder, owned by the sandbox user;
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

import contextlib
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SANDBOX_ID",
    "Limits",
    "SandboxStatus",
    "command",
    "prepare_workdir",
    "privileged",
    "private_ancestors",
    "status",
]

#: The uid and gid the child runs as ("nobody"), on the host too when the service is root.
SANDBOX_ID = 65534
#: bwrap's namespaces without the user namespace (a root service drops privileges with
#: ``setpriv`` instead, so that the child is host uid 65534, not host root)
_NAMESPACES = [
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
]
_SETPRIV_DROP = [
    f"--reuid={SANDBOX_ID}",
    f"--regid={SANDBOX_ID}",
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
]


def privileged() -> bool:
    """Whether this service runs as root (then no user namespace, ``setpriv`` inside)."""
    return os.geteuid() == 0


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
    setpriv: str | None = None


@functools.lru_cache(maxsize=1)
def status() -> SandboxStatus:
    """Whether replay can be sandboxed here (``bwrap`` present and able to make namespaces)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return SandboxStatus(
            False, "bubblewrap (bwrap) is not installed: replay is off (apt-get install bubblewrap)"
        )
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        return SandboxStatus(False, "prlimit (util-linux) is not installed: replay is off", bwrap)
    setpriv = shutil.which("setpriv")
    if privileged() and setpriv is None:
        return SandboxStatus(
            False,
            "setpriv (util-linux) is not installed: as root, replay "
            "cannot drop to an unprivileged user, so it is off",
            bwrap,
        )
    probe_cmd = [
        bwrap,
        "--die-with-parent",
        *_identity(setpriv),
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *_drop(setpriv),
        "true",
    ]
    try:
        probe = subprocess.run(probe_cmd, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus(False, f"bubblewrap cannot run here: {exc}", bwrap)
    if probe.returncode != 0:
        err = probe.stderr.decode(errors="replace").strip()[:300]
        return SandboxStatus(False, f"bubblewrap cannot create namespaces here: {err}", bwrap)
    how = f"host uid {SANDBOX_ID} through setpriv" if privileged() else "user namespace (uid 65534)"
    return SandboxStatus(
        True,
        f"bubblewrap: PID, network, IPC, UTS and cgroup namespaces; {how}",
        bwrap,
        prlimit,
        setpriv,
    )


def _identity(setpriv: str | None) -> list[str]:
    """bwrap's namespace options: without a user namespace as root, with one otherwise."""
    if privileged():
        return list(_NAMESPACES)
    return ["--unshare-all", "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID)]


def _drop(setpriv: str | None) -> list[str]:
    """The command prefix inside the sandbox that becomes host uid 65534 (root only)."""
    if privileged() and setpriv is not None:
        return [setpriv, *_SETPRIV_DROP, "--"]
    return []


def private_ancestors(paths: Sequence[Path]) -> list[Path]:
    """Ancestor folders of ``paths`` that the sandbox user may not enter (no ``o+x``, like
    ``/root``), shallowest first: each is covered by an empty tmpfs before what is needed
    under it is bound back, so the sandbox user can reach those paths and nothing else."""
    out: set[Path] = set()
    for path in paths:
        for parent in Path(path).parents:
            if parent == parent.parent:
                continue
            try:
                mode = parent.stat().st_mode
            except OSError:
                continue
            if not mode & 0o001:
                out.add(parent)
    return sorted(out, key=lambda p: (len(p.parts), str(p)))


def _mount_points(path: Path, covered: Sequence[Path]) -> list[str]:
    """``--dir`` (mode 0755) for the ancestors of ``path`` inside an empty tmpfs, so that the
    sandbox user can walk down to it (bubblewrap would create them 0700 for root)."""
    out: list[str] = []
    for parent in reversed(path.parents):
        if any(parent != c and parent.is_relative_to(c) for c in covered):
            out += ["--perms", "0755", "--dir", str(parent)]
    return out


def prepare_workdir(path: Path) -> None:
    """Make ``path`` (a batch's or a job's work folder) the sandbox user's own, so that the
    child can write its results there; a no-op unless the service runs as root."""
    if not privileged():
        return
    os.chown(path, SANDBOX_ID, SANDBOX_ID)
    os.chmod(path, 0o711)  # bwrap (root without capabilities) must enter it for --chdir
    for child in path.rglob("*"):
        with contextlib.suppress(OSError):
            os.chown(child, SANDBOX_ID, SANDBOX_ID, follow_symlinks=False)


def interpreter_paths() -> list[Path]:
    """What the child's interpreter needs to see: this Python (prefixes, executable) and every
    folder on its import path (the venv's site-packages, an editable install's source tree)."""
    paths = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(sys.executable).parent,
    ]
    paths += [Path(p) for p in sys.path if p and os.path.isabs(p)]
    return list(dict.fromkeys(paths))


def command(
    argv: Sequence[str],
    *,
    workdir: Path,
    hidden: Sequence[Path],
    readable: Sequence[Path],
    limits: Limits | None = None,
) -> list[str]:
    """``argv`` wrapped in ``prlimit`` and bubblewrap (see the module docstring).

    ``workdir`` is the only writable folder (and the working directory; the caller
    makes it the sandbox user's with :func:`prepare_workdir`); ``/tmp``, the folders
    the sandbox user may not enter (:func:`private_ancestors`) and the ``hidden``
    folders are covered by an empty tmpfs, after which the ``readable`` ones and
    :func:`interpreter_paths` (a venv may live under ``/tmp``) are bound back read-only.
    """
    st = status()
    if not st.available or st.bwrap is None or st.prlimit is None:
        raise RuntimeError(st.reason)
    lim = limits or Limits()
    cmd = [
        st.prlimit,
        f"--cpu={lim.cpu_s}",
        f"--as={lim.address_space_bytes}",
        f"--fsize={lim.file_size_bytes}",
        f"--nofile={lim.open_files}",
        f"--nproc={lim.processes}",
        "--",
        st.bwrap,
        "--die-with-parent",
        "--new-session",
        *_identity(st.setpriv),
        # as root, setpriv needs CAP_SETUID to drop to 65534 (and then drops every cap)
        *([] if privileged() else ["--cap-drop", "ALL"]),
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    # mounts apply in order: folders the sandbox user cannot enter become empty, then the
    # interpreter (it may live under /tmp), then the hidden folders over anything above,
    # then what must stay readable inside them
    interp = [p for p in interpreter_paths() if p.exists()]
    needed = [*interp, *[p for p in readable if p.exists()], workdir]
    private = [f for f in private_ancestors(needed) if f != Path("/tmp")]
    for folder in private:
        cmd += ["--perms", "0755", "--tmpfs", str(folder)]
    for path in interp:
        cmd += _mount_points(path, private)
        cmd += ["--ro-bind", str(path), str(path)]
    covered = [*private, *[f for f in hidden if f.is_dir()]]
    for folder in hidden:
        if folder.is_dir():
            cmd += ["--perms", "0755", "--tmpfs", str(folder)]
    for path in readable:
        if path.exists():
            cmd += _mount_points(path, covered)
            cmd += ["--ro-bind", str(path), str(path)]
    cmd += [
        "--bind",
        str(workdir),
        str(workdir),
        "--chdir",
        str(workdir),
        "--",
        *_drop(st.setpriv),
        *argv,
    ]
    return cmd
