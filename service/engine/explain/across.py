"""What the answer says about other ingested releases: the range, differences, upgrades.

:func:`check_changes` looks the located check up in the other ingested
releases (:func:`~service.engine.locate.check_history.check_across`): the
releases after the diagnosed one become the answer's ``later_releases`` and
``upgrade`` ("upgrading to ≥ X removes this check"), the older releases of an
inferred release range its ``differences`` (another line, file or condition).
:func:`flag_changes` does the same for the flags an argparse error names, from
their :class:`~service.engine.locate.flag_history.FlagHistory`.
:func:`release_notes` writes the markdown paragraphs of the explanation. Every
citation comes from a row of the KB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kb.code_types import Check
from kb.store import Store
from service.engine.answer import ReleaseChange
from service.engine.locate.check_history import (
    check_across,
    ingested_releases,
    range_differences,
    upgrade_note,
)
from service.engine.locate.flag_history import FlagHistory
from service.engine.release.versions import parse_version

__all__ = ["check_changes", "flag_changes", "release_notes"]


def check_changes(
    store: Store, version: str, check: Check, release: dict[str, Any]
) -> tuple[list[ReleaseChange], str | None, list[str]]:
    """The located check in the other ingested releases: the changes after ``version``,
    the upgrade that removes or changes it, and how the older releases of the range
    (when the release was inferred as a range) hold it differently. The range's
    ``differences`` in ``release`` (the resolution's dump) are filled in too."""
    ingested = ingested_releases(store)
    rng = release.get("range") or {}
    in_range = [r for r in rng.get("releases") or [] if r != version]
    pos = ingested.index(version) if version in ingested else len(ingested)
    newer = ingested[pos + 1 :]
    changes = check_across(store, version, check, sorted(set(in_range) | set(newer)))
    later = [
        ReleaseChange(
            subject="check",
            release=c.release,
            status=c.status,
            note=c.note,
            citations=c.citations,
            condition=c.condition,
        )
        for c in changes
        if c.release in newer
    ]
    differences = range_differences(version, changes, in_range)
    if rng:
        rng["differences"] = differences
    return later, upgrade_note(version, changes), differences


def flag_changes(
    history: Sequence[FlagHistory], version: str
) -> tuple[list[ReleaseChange], str | None]:
    """The flags' changes in the releases after ``version``, and one sentence on the
    flags the diagnosed release lacks: where they were added, removed or renamed."""
    key = parse_version(version)
    later: list[ReleaseChange] = []
    told: list[str] = []
    for h in history:
        for c in h.changes:
            v = parse_version(c.release)
            after = key is not None and v is not None and v > key
            if after:
                later.append(
                    ReleaseChange(
                        subject=h.flag,
                        release=c.release,
                        status=c.kind,
                        note=c.text,
                        citations=[c.citation] if c.citation else [],
                    )
                )
            if version in h.absent_in and (after or c.kind in ("removed", "renamed")):
                told.append(c.text)
    return later, "; ".join(dict.fromkeys(told)) or None


def release_notes(release: dict[str, Any], upgrade: str | None, differences: list[str]) -> str:
    """Markdown paragraphs on the inferred release range and the check in other releases."""
    out = ""
    rng = release.get("range") or {}
    if rng.get("releases") and len(rng["releases"]) < len(rng.get("ingested") or []):
        used = [p["text"] for p in rng.get("evidence") or [] if p.get("used")]
        out += f"\n\n**Release range:** {rng['text']}" + "".join(f"\n- {u}" for u in used)
    if differences:
        out += "\n\nOlder releases of the range differ:" + "".join(f"\n- {d}" for d in differences)
    if upgrade:
        out += f"\n\n**Later releases:** {upgrade}."
    return out
