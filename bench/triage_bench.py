"""Benchmark (b)+(c): /triage latency, throughput and the service's RSS.

Starts ``sglang-triage serve`` on loopback with 1 and then N uvicorn workers,
warms it, and sends a bounded number of requests (count and time limits) from
a pool of concurrent clients, cycling over crash logs rendered from the KB
(the eval incidents when present). Deterministic path: no LLM is configured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

TARGETS = {"p50_ms": 30.0, "p99_ms": 150.0, "rps": 100.0, "rss_mb": 1024.0}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _logs(limit: int) -> list[dict]:
    """Request bodies: shipped eval incidents, else the example seed logs."""
    bodies: list[dict] = []
    inc_dir = Path(__file__).resolve().parent.parent / "sglang_triage" / "evals" / "incidents"
    for path in sorted(inc_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            body = {"log": d["crash_log"]}
            for key in ("release", "hardware", "model"):
                if d.get(key):
                    body[key] = d[key]
            if d.get("command"):
                body["command"] = d["command"] if isinstance(d["command"], str) else " ".join(d["command"])
            bodies.append(body)
    if not bodies:
        ex = Path(__file__).resolve().parent.parent / "examples"
        bodies = [{"log": p.read_text(), "release": "0.5.11"} for p in sorted(ex.glob("*.log"))]
    return bodies[:limit]


def _rss_mb(pid: int) -> float:
    """RSS of a process and its children (uvicorn workers), from /proc."""
    total = 0
    pids = [pid]
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
        pids += [int(p) for p in out.split()]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


async def _load(url: str, bodies: list[dict], total: int, concurrency: int, max_s: float) -> dict:
    latencies: list[float] = []
    errors = 0
    sent = 0
    deadline = time.monotonic() + max_s
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async def worker(i: int) -> None:
            nonlocal errors, sent
            while sent < total and time.monotonic() < deadline:
                body = bodies[sent % len(bodies)]
                sent += 1
                t = time.perf_counter()
                try:
                    r = await client.post("/triage", json=body)
                    if r.status_code >= 500:
                        errors += 1
                except httpx.HTTPError:
                    errors += 1
                latencies.append((time.perf_counter() - t) * 1000)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        wall = time.perf_counter() - t0
    latencies.sort()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2)

    return {"requests": len(latencies), "errors": errors, "wall_s": round(wall, 2),
            "rps": round(len(latencies) / wall, 1), "p50_ms": pct(0.5), "p95_ms": pct(0.95),
            "p99_ms": pct(0.99), "mean_ms": round(statistics.fmean(latencies), 2)}


def run_workers(workers: int, bodies: list[dict], total: int, concurrency: int, max_s: float) -> dict:
    port = _port()
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "sglang_triage.service.cli", "serve", "--port",
                             str(port), "--workers", str(workers)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        # warm: every body once per worker
        asyncio.run(_load(url, bodies, len(bodies) * workers, workers, 300))
        result = asyncio.run(_load(url, bodies, total, concurrency, max_s))
        result["rss_mb"] = _rss_mb(proc.pid)
        result["workers"] = workers
        return result
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="bench/results/triage.json")
    args = ap.parse_args()
    bodies = _logs(100)
    results = {"targets": TARGETS, "bodies": len(bodies), "runs": []}
    for w in sorted({1, args.workers}):
        r = run_workers(w, bodies, args.requests, args.concurrency, args.max_seconds)
        r["met"] = {"p50_ms": r["p50_ms"] <= TARGETS["p50_ms"], "p99_ms": r["p99_ms"] <= TARGETS["p99_ms"],
                    "rps": r["rps"] >= TARGETS["rps"] and r["errors"] == 0,
                    "rss_mb": r["rss_mb"] <= TARGETS["rss_mb"] * w}
        results["runs"].append(r)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
