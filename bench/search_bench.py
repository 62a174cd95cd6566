"""Benchmark: triages that need the replay-backed fix search, end to end (issue target:
p50 ≤ 5 s), and triages that don't (they keep the engine's latency).

For shipped generated incidents of each release (0.5.21 and 0.5.23 by default: the
resolution pipeline), each log is answered end to end as the service does: the engine
(:class:`service.usecase.TriageUseCase`, its time is ``static_*``), then the replay-backed fix
search with the service's defaults (the candidates when static evaluation left something
undecided, else the recommended fix first) with the replay cache off, so every command
line is really replayed. The first triage of a release starts its warm replay worker:
that run is reported apart (``first_s``) from the warm ones.

``python bench/search_bench.py [--releases 0.5.21,0.5.23] [--per-release 8]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from bench.common import percentile, test_kb_dir  # noqa: E402
from evals.incidents import load_incidents  # noqa: E402
from evals.runner import request_for  # noqa: E402
from kb.knowledge import KnowledgeBase  # noqa: E402
from service.engine import Engine  # noqa: E402
from service.replay.fix_search import needs_search, search_fixes  # noqa: E402
from service.settings import Settings  # noqa: E402
from service.usecase import TriageRequest, TriageUseCase  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "search_bench.json"


def _options(body: dict) -> dict:
    return {k: body.get(k) for k in ("hardware", "model", "model_arch")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", default="0.5.21,0.5.23")
    ap.add_argument("--per-release", type=int, default=12)
    ap.add_argument(
        "--deadline",
        type=float,
        default=30.0,
        help="the search's deadline here (the service's default is 4 s)",
    )
    args = ap.parse_args()
    settings = Settings(
        kb_dir=test_kb_dir(), chroma_url=None, on_demand_ingest=False, fix_search_deadline_s=0.0
    )
    engine = Engine(KnowledgeBase(settings), settings)
    out: dict = {"deadline_s": args.deadline, "releases": {}}
    searched_all: list[float] = []
    static_all: list[float] = []  # ms
    for release in args.releases.split(","):
        incidents = [
            i for i in load_incidents() if i.expected.release == release and i.id.startswith("gen-")
        ][: args.per_release]
        runs: list[dict] = []
        for inc in incidents:
            body = request_for(inc)
            payload = {k: v for k, v in body.items() if k in ("log", "command", "model")}
            t = time.perf_counter()
            answer = TriageUseCase(engine, settings).answer(
                TriageRequest(payload, **_options(body))
            )
            static_all.append((time.perf_counter() - t) * 1000)
            wide = needs_search(answer)
            answer = search_fixes(answer, settings, deadline_s=args.deadline, use_cache=False)
            seconds = time.perf_counter() - t
            runs.append(
                {
                    "id": inc.id,
                    "seconds": round(seconds, 2),
                    "undecided": wide,
                    "status": answer.fix_search.status if answer.fix_search else None,
                    "candidates": answer.fix_search.candidates if answer.fix_search else None,
                }
            )
        warm = [r["seconds"] for r in runs[1:]]
        searched_all += warm
        out["releases"][release] = {
            "incidents": len(incidents),
            "undecided": sum(r["undecided"] for r in runs),
            "first_s": runs[0]["seconds"] if runs else None,
            "warm_p50_s": percentile(warm, 0.5),
            "warm_p95_s": percentile(warm, 0.95),
            "runs": runs,
        }
    out["search_p50_s"] = percentile(searched_all, 0.5)
    out["search_p95_s"] = percentile(searched_all, 0.95)
    out["static_p50_ms"] = percentile(static_all, 0.5)
    out["static_p95_ms"] = percentile(static_all, 0.95)
    out["target"] = {"search_p50_s": 5.0}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k != "releases"}, indent=2))
    for release, r in out["releases"].items():
        print(release, {k: v for k, v in r.items() if k != "runs"})


if __name__ == "__main__":
    main()
