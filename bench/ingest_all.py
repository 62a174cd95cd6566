"""Benchmark: the structural ingest of every release from ``--since`` to the newest, in order.

What ``sglang-triage ingest --all`` does, into one KB folder (``--kb-dir``;
default a fresh temporary folder, removed afterwards), with every release at
scope ``none`` (no embeddings: they are the default releases' business and are
measured by ``ingest_bench.py``). Releases go oldest first, so each one reuses
the rows of the files its predecessor left unchanged.

Per release: ``wall_s`` (fetch from the wheel cache or PyPI, plus ingest),
``structure_s`` (the ingest's own structural stage), files ``parsed`` and
``reused`` (rows not re-derived: copied or linked), functions and checks, and the KB's
size after it (``index_bytes`` of ``index.sqlite``, ``wal_bytes`` of its WAL).
Skipped releases are listed with their reason. Totals: releases, seconds, files
parsed and reused, the final index size and its growth per release.

About 15 minutes from 0.5.0 on this 2-core machine (more when wheels are not
cached yet), so ``make bench`` runs it only with ``BENCH_ALL=1``. Results go to
``bench/results/ingest_all.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from ingest.acquire.batch import ingest_all  # noqa: E402
from ingest.acquire.pypi_index import Skip, list_releases  # noqa: E402
from ingest.pipeline import IngestReport  # noqa: E402
from kb.knowledge import KnowledgeBase  # noqa: E402
from service.settings import Settings  # noqa: E402

__all__ = ["main", "run"]


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def run(kb_dir: Path, since: str, until: str | None = None) -> dict[str, Any]:
    """Ingest every listed release in ``[since, until]`` into ``kb_dir``; the measured rows."""
    settings = Settings().model_copy(update={"kb_dir": kb_dir, "chroma_url": None, "releases": []})
    listing = list_releases(settings.pip_index_url, since=since)
    if until:
        from packaging.version import Version

        listing.releases = [r for r in listing.releases if Version(r.version) <= Version(until)]
    kb = KnowledgeBase(settings)
    index = kb_dir / "index.sqlite"
    rows: list[dict[str, Any]] = []
    last = time.perf_counter()

    def measured(outcome: IngestReport | Skip) -> None:
        nonlocal last
        now = time.perf_counter()
        if isinstance(outcome, Skip):
            rows.append({"version": outcome.version, "skipped": outcome.reason})
        else:
            rows.append(
                {
                    "version": outcome.version,
                    "structure": outcome.structure,
                    "wall_s": round(now - last, 2),
                    "structure_s": outcome.timings.get("structure_s"),
                    "files": outcome.files,
                    "parsed": outcome.parsed,
                    "reused": outcome.reused_files,
                    "reused_from": getattr(
                        outcome, "reused_from", None
                    ),  # gone with the content store
                    "functions": outcome.functions,
                    "checks": outcome.checks,
                    "index_bytes": _size(index),
                    "wal_bytes": _size(index.with_name("index.sqlite-wal")),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        last = now

    load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        result = ingest_all(
            kb, settings, since=since, scope="none", on_release=measured, listing=listing
        )
    finally:
        kb.close()
    done = [r for r in rows if "skipped" not in r]
    index_bytes = _size(index)
    return {
        "since": since,
        "until": until,
        "index_url": result.index_url,
        "cpus": os.cpu_count(),
        "load_avg_1_5_15": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "releases": rows,
        "totals": {
            "listed": result.listed,
            "ingested": len(done),
            "skipped": len(rows) - len(done),
            "seconds": round(result.seconds, 2),
            "structure_s": round(sum(r["structure_s"] or 0 for r in done), 2),
            "files": sum(r["files"] for r in done),
            "parsed": sum(r["parsed"] for r in done),
            "reused": sum(r["reused"] for r in done),
            "index_bytes": index_bytes,  # after close: the WAL is checkpointed into it
            "index_bytes_per_release": round(index_bytes / len(done)) if done else None,
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--since", default="0.5.0", help="first release (inclusive)")
    ap.add_argument("--until", default=None, help="last release (inclusive; default the newest)")
    ap.add_argument(
        "--kb-dir",
        type=Path,
        default=None,
        help="KB folder to ingest into (default: a fresh temporary folder)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ingest_all.json")
    args = ap.parse_args(argv)
    tmp = None if args.kb_dir else Path(tempfile.mkdtemp(prefix="ingest-all-"))
    try:
        result = run(args.kb_dir or tmp, args.since, args.until)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["totals"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
