"""Replay stub of ``psutil``: this host's memory and CPU count, read from ``/proc`` and ``os``."""

from __future__ import annotations

import os
from collections import namedtuple
from typing import Any

from _replay_stubkit import VERSIONS, module_getattr

__version__ = VERSIONS["psutil"]
__replay_stub__ = True
__getattr__ = module_getattr("psutil")

svmem = namedtuple("svmem", "total available percent used free")


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def virtual_memory() -> svmem:
    info = _meminfo()
    total = info.get("MemTotal", 64 << 30)
    avail = info.get("MemAvailable", total // 2)
    used = total - avail
    return svmem(total, avail, round(100.0 * used / total, 1), used, info.get("MemFree", avail))


def cpu_count(logical: bool = True) -> int:
    return os.cpu_count() or 1


class Process:
    """``psutil.Process(pid)`` with the few methods SGLang touches at start-up."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = os.getpid() if pid is None else pid

    def children(self, recursive: bool = False) -> list[Any]:
        return []

    def cpu_affinity(self, cpus: Any = None) -> list[int]:
        return list(range(cpu_count()))

    def memory_info(self) -> Any:
        return namedtuple("pmem", "rss vms")(0, 0)

    def __getattr__(self, name: str) -> Any:
        return module_getattr(f"psutil.Process({self.pid})")(name)


class NoSuchProcess(Exception):
    pass


class AccessDenied(Exception):
    pass
