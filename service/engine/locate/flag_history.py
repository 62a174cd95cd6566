"""When each flag existed: the releases of the KB that know a spelling, and renames between them."""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from kb.catalogs import load_catalog
from kb.store import Store

__all__ = ['FlagHistory', 'flag_history']


class FlagHistory(BaseModel):
    """Where a flag spelling exists among the ingested releases."""

    flag: str
    present_in: list[str]
    absent_in: list[str]
    note: str | None
    renamed_to: str | None = None  # its attribute's spelling in the diagnosed release


def _vkey(version: str) -> tuple[int, Any]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def _releases(store: Store) -> list[str]:
    rows = store.query(
        "SELECT version FROM releases WHERE status IN ('indexed', 'complete') "
        "AND version IN (SELECT DISTINCT release FROM flag_spellings)")
    return sorted((r["version"] for r in rows), key=_vkey)


def flag_history(store: Store, flag: str, release: str) -> FlagHistory:
    """Presence of ``flag`` in each ingested release, relative to ``release``.

    The note names the transitions between consecutive releases ("added after
    0.5.11", "removed after 0.5.11"); when the flag is missing from ``release``
    but its attribute exists there under another spelling, ``renamed_to`` is that
    spelling.
    """
    flag = flag.split("=", 1)[0]
    releases = _releases(store)
    rows = store.query("SELECT release, attr FROM flag_spellings WHERE spelling = ?", (flag,))
    attrs = {r["release"]: r["attr"] for r in rows}
    present = [v for v in releases if v in attrs]
    absent = [v for v in releases if v not in attrs]
    renamed: str | None = None
    if release not in attrs and attrs:
        renamed = _renamed_spelling(store, release, set(attrs.values()))
    if not present:
        note: str | None = f"{flag} is not a flag in any ingested release ({', '.join(releases)})"
    elif not absent:
        note = None
    else:
        steps = []
        for a, b in zip(releases, releases[1:], strict=False):
            if (a in attrs) != (b in attrs):
                steps.append(f"{'removed' if a in attrs else 'added'} after {a}")
        note = (f"{flag} exists in {', '.join(present)} but not in {', '.join(absent)}"
                f" ({'; '.join(steps)})")
    if renamed is not None:
        attr = next(iter(sorted(set(attrs.values()))))
        note = (note + "; " if note else "") + (
            f"its attribute `{attr}` is spelled {renamed} in {release}")
    return FlagHistory(flag=flag, present_in=present, absent_in=absent, note=note,
                       renamed_to=renamed)


def _renamed_spelling(store: Store, release: str, attrs: set[str]) -> str | None:
    try:
        catalog = load_catalog(store, release)
    except Exception:  # noqa: BLE001 - no catalog: no rename information
        return None
    for attr in sorted(attrs):
        spec = catalog.by_attr().get(attr)
        if spec is not None and spec.flags:
            return spec.flags[0]
    return None
