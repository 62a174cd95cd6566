"""Incidents of start-up crashes past argument validation, one set per check *family*
(issue #27), and the command that writes them (``python -m evals.families``).

=============================  ==============================================================
family                         how its incidents are made
=============================  ==============================================================
``block_shape``                replay (:mod:`evals.families.replayed`): the release's own
``moe_runner_a2a``             start-up code, run by replay's start-up probes, refuses a
                               failing launch; the crash log is replay's real frames and
                               message, and every acceptable fix is a command the same probe
                               accepted
``layer_attention_backend``    rendered (:mod:`evals.families.rendered`): the release's own
``memory_pool``                raise with its message filled in with a failing launch's values
                               (replay does not reach these checks: they need a device);
                               acceptable fixes follow from the check's own test
=============================  ==============================================================

The incidents are written to ``evals/incidents/families.jsonl`` (not one of the default
set's files: the family gate, ``tests/evals/test_family_gate.py``, scores them apart, with
their frameless variants). Each carries ``family``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from evals.incidents import INCIDENTS_DIR, Incident, dump_incidents, load_incidents
from kb.settings import KBSettings
from kb.store import Store

__all__ = ["FAMILIES", "FAMILIES_FILE", "REPLAYED", "generate", "load_family_incidents", "main"]

#: every family, in report order
FAMILIES: tuple[str, ...] = (
    "block_shape",
    "moe_runner_a2a",
    "layer_attention_backend",
    "memory_pool",
)
#: the families replay's start-up probes reach (their fixes carry SGLang's verdict)
REPLAYED: tuple[str, ...] = ("block_shape", "moe_runner_a2a")
FAMILIES_FILE = INCIDENTS_DIR / "families.jsonl"


def generate(store: Store, settings: KBSettings | None, releases: Sequence[str]) -> list[Incident]:
    """Every family's incidents for ``releases`` (the replayed families need ``settings``
    with a sandbox and the releases' wheels; without them they are left out)."""
    from evals.families.equivalents import with_equivalents
    from evals.families.rendered import rendered_incidents
    from evals.families.replayed import replayed_incidents

    out = rendered_incidents(store, releases)
    if settings is not None:
        out += replayed_incidents(store, settings, releases)
    out = with_equivalents(store, out, [r["version"] for r in store.releases()])
    return sorted(out, key=lambda i: (FAMILIES.index(i.family or ""), i.id))


def load_family_incidents(path: Path = FAMILIES_FILE) -> list[Incident]:
    """The shipped family incidents."""
    return load_incidents([path])


def main(argv: Sequence[str] | None = None) -> int:
    """Write the family incidents of ``--releases`` from the KB to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m evals.families", description=__doc__)
    parser.add_argument("--releases", default="0.5.5,0.5.9,0.5.11,0.5.16,0.5.21,0.5.23")
    parser.add_argument("--out", type=Path, default=FAMILIES_FILE)
    parser.add_argument(
        "--kb", default=None, help="KB folder (default: TRIAGE_KB_DIR or <home>/kb)"
    )
    parser.add_argument(
        "--no-replay", action="store_true", help="rendered families only (no sandbox needed)"
    )
    args = parser.parse_args(argv)
    from evals.confirm import kb_settings

    settings = kb_settings(args.kb)
    store = Store(settings.kb_path / "index.sqlite")
    releases = [r.strip() for r in args.releases.split(",") if r.strip()]
    for release in releases:
        store.require(release)
    incidents = generate(store, None if args.no_replay else settings, releases)
    dump_incidents(incidents, args.out)
    counts = {f: sum(i.family == f for i in incidents) for f in FAMILIES}
    print(f"{len(incidents)} incidents -> {args.out}: {counts}")
    return 0
