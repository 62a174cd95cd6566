"""How much the stored triages may take: the byte bound and the disk's free space.

* :func:`disk_refusal` — before a triage is stored: when the disk holding the records
  (the SQLite file's folder) has less than ``TRIAGE_RECORDS_MIN_FREE_BYTES`` free, the
  triage is answered but not stored, and the answer says why (``degraded``). A records
  server (PostgreSQL) is not on this machine's disk: only the byte bound applies.
* :class:`RetentionClock` — after a triage is stored: the retention limits (age, count, and
  ``TRIAGE_RECORDS_MAX_BYTES``, oldest unconfirmed triages purged first) are applied every
  :data:`PURGE_EVERY` stored triages, or sooner once the bytes stored since the last purge
  reach a tenth of the byte bound, so the bound is never overshot by more than that.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from kb.records import Records
from service.settings import Settings

__all__ = ["PURGE_EVERY", "RetentionClock", "disk_refusal", "free_bytes", "retention"]

#: Stored triages between two purges of the records (retention limits).
PURGE_EVERY = 200


def free_bytes(records: Records) -> int | None:
    """Free bytes on the disk of the records' SQLite file (None: a server, or unknown)."""
    if records.path is None:
        return None
    folder: Path = records.path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def disk_refusal(records: Records, settings: Settings) -> str | None:
    """Why a new triage may not be stored now (None: it may)."""
    free = free_bytes(records)
    if free is not None and free < settings.records_min_free_bytes:
        return (
            f"not stored: the records' disk is nearly full ({free >> 20} MiB free, "
            f"TRIAGE_RECORDS_MIN_FREE_BYTES is {settings.records_min_free_bytes >> 20} MiB); "
            "this answer has no permalink"
        )
    return None


class RetentionClock:
    """Counts stored triages and their bytes; says when to purge (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._saves = 0
        self._bytes = 0

    def stored(self, records: Records, settings: Settings, nbytes: int) -> int:
        """Note one stored triage of ``nbytes``; purge when it is time. Returns how many
        triages were purged."""
        bound = settings.records_max_bytes
        with self._lock:
            self._saves += 1
            self._bytes += nbytes
            due = self._saves >= PURGE_EVERY or (bound is not None and self._bytes * 10 >= bound)
            if due:
                self._saves = self._bytes = 0
        if not due:
            return 0
        return records.purge(
            max_age_days=settings.records_max_age_days,
            max_count=settings.records_max_count,
            max_bytes=bound,
        )


#: The process's clock (every front end that stores a triage stores through it).
retention = RetentionClock()
