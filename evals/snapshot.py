"""Snapshot the engine's answers to the shipped incidents, and compare two snapshots.

A refactoring that should not change behaviour is checked by taking a snapshot
before and after it::

    python -m evals.snapshot --out before.jsonl         # old code
    python -m evals.snapshot --out after.jsonl --compare before.jsonl

Each line is one incident's answer as the API would return it, without what
differs from run to run (``timings_ms``, ``id``, ``replay``). ``--compare`` prints
the incidents whose answers differ, with the first differing fields, and exits 1
when any does.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evals.incidents import Incident, load_incidents
from evals.runner import engine_call, request_for

__all__ = ["compare", "snapshot"]

VOLATILE = frozenset({"timings_ms", "id", "replay"})


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def snapshot(engine: Any, incidents: Iterable[Incident]) -> dict[str, Any]:
    """incident id -> the engine's answer (or its error), without volatile fields."""
    call = engine_call(engine)
    out: dict[str, Any] = {}
    for inc in incidents:
        try:
            out[inc.id] = {"answer": _strip(call(request_for(inc)))}
        except Exception as exc:
            out[inc.id] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _first_differences(a: Any, b: Any, path: str = "", limit: int = 3) -> list[str]:
    if type(a) is not type(b):
        return [f"{path or '.'}: {str(a)[:80]!r} -> {str(b)[:80]!r}"]
    if isinstance(a, dict):
        found: list[str] = []
        for k in sorted(set(a) | set(b)):
            found += _first_differences(a.get(k), b.get(k), f"{path}.{k}", limit)
            if len(found) >= limit:
                break
        return found[:limit]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items -> {len(b)}"]
        found = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found += _first_differences(x, y, f"{path}[{i}]", limit)
            if len(found) >= limit:
                break
        return found[:limit]
    return [] if a == b else [f"{path}: {str(a)[:80]!r} -> {str(b)[:80]!r}"]


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[str]]:
    """incident id -> its first differences (only incidents that differ or are missing)."""
    return {
        k: (_first_differences(before.get(k), after.get(k)) or ["missing"])
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    }


def _read(path: Path) -> dict[str, Any]:
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["incident"]: {k: v for k, v in r.items() if k != "incident"} for r in rows}


def main(argv: list[str] | None = None) -> int:
    from kb.knowledge import KnowledgeBase
    from service.engine import Engine, EngineSettings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path, help="an earlier snapshot to compare with")
    ap.add_argument("--incidents", nargs="*", help="JSONL files (default: the shipped ones)")
    ap.add_argument("--kb", type=Path, help="KB folder (default: TRIAGE_KB_DIR or the cache's)")
    args = ap.parse_args(argv)
    settings = EngineSettings(**({"kb_dir": args.kb} if args.kb else {}))
    snap = snapshot(Engine(KnowledgeBase(settings), settings), load_incidents(args.incidents))
    args.out.write_text(
        "".join(json.dumps({"incident": k, **v}, sort_keys=True) + "\n" for k, v in snap.items())
    )
    if args.compare is None:
        print(f"{len(snap)} answers -> {args.out}")
        return 0
    diff = compare(_read(args.compare), snap)
    for inc, lines in diff.items():
        print(inc)
        for line in lines:
            print("   ", line)
    print(f"{len(snap) - len(diff)} of {len(snap)} answers identical")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
