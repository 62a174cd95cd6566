"""Benchmark: the warm replay pool (issue #20) against a cold replay, per candidate command line.

For each release (default 0.5.11 and 0.5.23, both in the test KB) on ``rtx-pro-6000-x8``:

1. one cold replay (``replay_many(..., pool=False)``: a fresh sandboxed subprocess that
   imports torch and SGLang, then validates) for reference;
2. the warm worker's start: the first ``replay_many`` call on a fresh pool, reported as the
   worker's ``start_s`` (sandbox, interpreter, stubs, torch and ``sglang.srt.server_args``)
   and that call's wall time;
3. ``--candidates`` (≥ 20) further calls, one distinct command line each, as a fix search
   makes them (passing ones, SGLang asserts, argparse errors), cache off: wall time per
   call → p50/p95 (targets p50 ≤ 1 s, p95 ≤ 3 s), plus the worker's RSS (MiB, the sandbox's
   whole process tree) after them.

``python bench/replay_pool_bench.py [--releases 0.5.11 0.5.23] [--candidates 24]``;
results in ``bench/results/replay_pool.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from bench.common import percentile  # noqa: E402
from kb.sources import fetch_release  # noqa: E402
from service.replay import harness, pool  # noqa: E402
from service.settings import Settings  # noqa: E402

HARDWARE = "rtx-pro-6000-x8"
LLAMA, DSV3 = "LlamaForCausalLM", "DeepseekV3ForCausalLM"
SEED = ["--model-path", "moonshotai/Kimi-K2.5", "--tp", "8", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "lmsys/SGLang-EAGLE3-Kimi-K2.5",
        "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]  # fmt: skip
TARGET_P50_S, TARGET_P95_S = 1.0, 3.0


def candidates(n: int, nonce: str) -> list[tuple[list[str], str]]:
    """``n`` distinct command lines (with the architecture of their model), mixed verdicts."""
    base = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "8"]
    out: list[tuple[list[str], str]] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append(([*base, "--mem-fraction-static", f"0.{60 + i}"], LLAMA))
        elif kind == 1:
            out.append(([*base, "--chunked-prefill-size", str(1024 * (i + 1))], LLAMA))
        elif kind == 2:
            out.append(
                (
                    [
                        *SEED[:8],
                        "--speculative-num-steps",
                        str(1 + i % 5),
                        "--max-running-requests",
                        str(32 + i),
                    ],
                    DSV3,
                )
            )
        else:
            out.append(([*base, f"--no-such-flag-{i}"], LLAMA))
    return [
        ([*argv, "--random-seed", f"{nonce}{i}"] if i % 4 != 3 else argv, arch)
        for i, (argv, arch) in enumerate(out)
    ]


def one_release(version: str, n: int, settings: Settings) -> dict[str, Any]:
    src = fetch_release(
        version,
        wheel_dir=settings.wheel_dir,
        source_dir=settings.source_dir,
        index_url=settings.pip_index_url,
    )
    nonce = str(int(time.time()) % 100000)
    kw: dict[str, Any] = {
        "hardware": HARDWARE,
        "settings": settings,
        "use_cache": False,
        "timeout_s": 240,
        "job_timeout_s": 60,
    }
    t = time.perf_counter()
    [cold] = harness.replay_many(src.root, version, [SEED], model_arch=DSV3, pool=False, **kw)
    cold_s = time.perf_counter() - t

    warm_pool = pool.WarmPool(max_workers=1)
    pool._DEFAULT = warm_pool  # a fresh pool for this release: its start is measured
    try:
        t = time.perf_counter()
        [first] = harness.replay_many(src.root, version, [SEED], model_arch=DSV3, pool=True, **kw)
        first_s = time.perf_counter() - t
        walls, statuses, validate = [], {}, []
        for argv, arch in candidates(n, nonce):
            t = time.perf_counter()
            [r] = harness.replay_many(src.root, version, [argv], model_arch=arch, pool=True, **kw)
            walls.append(time.perf_counter() - t)
            validate.append(r.timings.get("validate_s", 0.0))
            statuses[r.status] = statuses.get(r.status, 0) + 1
            assert r.timings.get("warm") == 1.0, r.summary()
        stats = warm_pool.stats()
    finally:
        warm_pool.close()
        pool._DEFAULT = None
    [worker] = stats["workers"]
    p50, p95 = percentile(walls, 0.5), percentile(walls, 0.95)
    return {
        "release": version, "hardware": HARDWARE,
        "cold_single_s": round(cold_s, 2), "cold_verdict": cold.status,
        "pool_start_s": worker["start_s"], "first_warm_call_s": round(first_s, 2),
        "first_verdict": first.status, "worker_rss_mib": worker["rss_mib"],
        "candidates": len(walls), "verdicts": statuses,
        "p50_s": p50, "p95_s": p95, "max_s": round(max(walls), 2),
        "validate_p50_s": percentile(validate, 0.5),
        "meets_targets": bool(p50 is not None and p95 is not None
                              and p50 <= TARGET_P50_S and p95 <= TARGET_P95_S),
        "worker_starts": worker["starts"], "jobs": worker["jobs"],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", nargs="+", default=["0.5.11", "0.5.23"])
    ap.add_argument("--candidates", type=int, default=24)
    ap.add_argument("--out", default="bench/results/replay_pool.json")
    args = ap.parse_args()
    if not harness.sandbox.status().available:
        raise SystemExit(f"replay is off here: {harness.sandbox.status().reason}")
    settings = Settings()
    runs = [one_release(v, max(20, args.candidates), settings) for v in args.releases]
    result = {
        "targets": {"p50_s": TARGET_P50_S, "p95_s": TARGET_P95_S},
        "load_avg": os.getloadavg(),
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
