"""In-process triage latency per stage, and a stable dump of every answer.

Opens a KB (``--kb-dir``, default ``TRIAGE_TEST_KB`` or ``<cache>/test-kb``, the
suite's KB), builds one :class:`~service.engine.triage.Engine`, warms it
on the seed logs, then triages the shipped eval incidents exactly as the eval
runner sends them (``--passes`` times) and prints p50/p95 per engine stage
(``timings_ms``). Deterministic path: the LLM is switched off.

``--dump FILE`` writes each incident's answer without timings (JSON lines) so
that two code versions can be compared answer for answer; ``--cprofile N``
prints the N most expensive functions of the warm passes.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from bench.common import percentile, test_kb_dir  # noqa: E402


def stable(result: dict[str, Any]) -> dict[str, Any]:
    """An answer without what legitimately varies between runs (timings, ids)."""
    return {k: v for k, v in result.items() if k not in ("timings_ms", "id", "similar", "replay")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb-dir", type=Path, default=None)
    ap.add_argument("--passes", type=int, default=3, help="warm passes over the incidents")
    ap.add_argument("--limit", type=int, default=200, help="at most this many incidents")
    ap.add_argument(
        "--incidents",
        nargs="*",
        default=None,
        help="JSONL files or folders (default: the shipped incidents)",
    )
    ap.add_argument("--dump", type=Path, default=None, help="answers, one JSON line each")
    ap.add_argument("--cprofile", type=int, default=0, help="print the top N functions")
    ap.add_argument(
        "--profile-first",
        action="store_true",
        help="profile the first pass (first sight of each incident) instead",
    )
    args = ap.parse_args(argv)

    from evals.incidents import load_incidents
    from evals.runner import request_for
    from kb.knowledge import KnowledgeBase
    from service.engine import Engine
    from service.settings import Settings

    kb_dir = args.kb_dir or test_kb_dir()
    settings = Settings(kb_dir=kb_dir, chroma_url=None, llm_base_url=None, replay_enabled=False)
    kb = KnowledgeBase(settings)
    engine = Engine(kb, settings)
    incidents = load_incidents(args.incidents)[: args.limit]
    bodies = [request_for(inc) for inc in incidents]

    def run(body: dict[str, Any]) -> dict[str, Any]:
        payload = {k: v for k, v in body.items() if k in ("log", "command", "model")}
        res = engine.triage(
            payload,
            hardware=body.get("hardware"),
            model=body.get("model"),
            model_arch=body.get("model_arch"),
        )
        return res.model_dump(mode="json")

    t0 = time.perf_counter()
    for name in ("seed_attempt1.log", "seed_attempt2.log"):
        engine.triage((ROOT / "examples" / name).read_text())
    print(f"warm-up on the seed logs: {(time.perf_counter() - t0) * 1000:.0f} ms", file=sys.stderr)

    answers: dict[str, Any] = {}
    first: list[float] = []
    stages: dict[str, list[float]] = {}
    slow: dict[str, list[float]] = {}
    errors = 0
    prof = cProfile.Profile() if args.cprofile else None
    for p in range(args.passes + 1):  # pass 0: first sight of each incident
        if prof is not None and p == (0 if args.profile_first else 1):
            prof.enable()
        if prof is not None and args.profile_first and p == 1:
            prof.disable()
        for inc, body in zip(incidents, bodies, strict=True):
            t = time.perf_counter()
            try:
                out = run(body)
            except Exception as exc:
                out = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                errors += p == 0
            ms = (time.perf_counter() - t) * 1000
            if p == 0:
                first.append(ms)
                answers[inc.id] = stable(out)
                continue
            for stage, v in (out.get("timings_ms") or {}).items():
                stages.setdefault(stage, []).append(v)
            stages.setdefault("wall", []).append(ms)
            slow.setdefault(inc.id, []).append(ms)
    if prof is not None:
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.cprofile)

    report = {
        "incidents": len(incidents),
        "errors": errors,
        "first_pass": {
            "p50_ms": percentile(first, 0.5),
            "p95_ms": percentile(first, 0.95),
            "mean_ms": round(statistics.fmean(first), 2) if first else 0.0,
        },
        "warm": {
            s: {
                "p50_ms": percentile(v, 0.5),
                "p95_ms": percentile(v, 0.95),
                "p99_ms": percentile(v, 0.99),
            }
            for s, v in sorted(stages.items())
        },
        "slowest_warm": dict(
            sorted(((k, round(min(v), 2)) for k, v in slow.items()), key=lambda kv: -kv[1])[:8]
        ),
    }
    print(json.dumps(report, indent=2))
    if args.dump:
        args.dump.write_text(
            "".join(json.dumps({"id": k, **v}, sort_keys=True) + "\n" for k, v in answers.items())
        )
    kb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
