"""Benchmark: a triage that first ingests the release its log names (issue target: ≤ 15 s
with the wheel cached), against the same triage once the release is in the KB.

Two starting points, each a fresh KB holding one release's structure:

- ``neighbour``: the release just before the one asked for (most files already known, as
  in a KB built with ``ingest --all``);
- ``distant``: an older release (few files known, as with only the default releases).

The log is a real bare assert of the asked-for release's ``ServerArgs``, found with
``ast`` in its source (the wheel is fetched into the cache before timing starts).

``python bench/ondemand_bench.py [--release 0.5.16] [--neighbour 0.5.15.post1] [--distant 0.5.11]``
"""

from __future__ import annotations

import argparse
import ast
import json
import tempfile
import time
from pathlib import Path

from ingest.pipeline import index_structure
from kb.knowledge import KnowledgeBase
from kb.sources import fetch_release
from service.engine import Engine, OnDemandNote
from service.settings import Settings
from service.usecase import TriageRequest, TriageUseCase

SA = "sglang/srt/server_args.py"


def crash_log(package: Path, version: str) -> str:
    text = (package / "srt" / "server_args.py").read_text()
    lines = text.splitlines()
    cls = next(
        n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"
    )
    for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Assert) and node.msg is None and node.lineno == node.end_lineno:
                return (
                    f"$ pip install sglang=={version}\nTraceback (most recent call last):\n"
                    f'  File "/usr/lib/python3.11/site-packages/{SA}", line {node.lineno}, '
                    f"in {fn.name}\n    {lines[node.lineno - 1].strip()}\nAssertionError\n"
                )
    raise SystemExit(f"no bare assert in {version}'s ServerArgs")


def one(base: str, release: str, log: str, settings: Settings, work: Path) -> dict:
    s = settings.model_copy(
        update={"kb_dir": work / base, "on_demand_embed": False, "replay_enabled": False}
    )
    kb = KnowledgeBase(s)
    t = time.perf_counter()
    index_structure(
        kb,
        fetch_release(
            base, wheel_dir=s.wheel_dir, source_dir=s.source_dir, index_url=s.pip_index_url
        ),
    )
    base_s = time.perf_counter() - t
    engine = Engine(kb, s)
    t = time.perf_counter()
    first = TriageUseCase(engine, s).answer(TriageRequest(log))
    first_s = time.perf_counter() - t
    t = time.perf_counter()
    TriageUseCase(engine, s).answer(TriageRequest(log))
    again_s = time.perf_counter() - t
    note = first.release.on_demand
    return {
        "base": base,
        "base_ingest_s": round(base_s, 2),
        "on_demand_triage_s": round(first_s, 2),
        "ingest_s": note.seconds if isinstance(note, OnDemandNote) else None,
        "detail": note.detail if isinstance(note, OnDemandNote) else None,
        "method": first.release.method,
        "located": first.status,
        "citation": first.location.citation if first.location else None,
        "already_ingested_triage_s": round(again_s, 3),
        "index_bytes": (work / base / "index.sqlite").stat().st_size,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", default="0.5.16")
    ap.add_argument("--neighbour", default="0.5.15.post1")
    ap.add_argument("--distant", default="0.5.11")
    ap.add_argument("--out", default="bench/results/ondemand.json")
    args = ap.parse_args()
    settings = Settings()
    src = fetch_release(
        args.release,
        wheel_dir=settings.wheel_dir,
        source_dir=settings.source_dir,
        index_url=settings.pip_index_url,
    )
    log = crash_log(src.package_dir, args.release)
    with tempfile.TemporaryDirectory() as tmp:
        result = {
            "release": args.release,
            "target_s": 15.0,
            "runs": [
                one(b, args.release, log, settings, Path(tmp))
                for b in (args.neighbour, args.distant)
            ],
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
