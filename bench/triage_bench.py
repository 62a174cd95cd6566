"""Benchmark (b)+(c): /triage latency, throughput and the service's RSS.

Starts ``sglang-triage serve`` on loopback with 1 and then N uvicorn workers and,
for each, on the deterministic path (no LLM, no replay):

1. warms it: passes over every request body until a whole pass is fast (its p99
   within the latency target) or a bounded number of passes/seconds is spent
   (with several workers a body must have been seen by each of them);
2. **latency**: requests one at a time (a single client), p50/p95/p99;
   then **unseen**: the same, each request a log the service has never seen (a
   new command line, :func:`unseen_bodies`, and rotated hardware facts), so no
   answer or facts-keyed cache can serve it: the deterministic path's cost on
   a first sight (1-worker run only); then **unseen_paths**, the same with the
   model under a path never seen before (as nearly every real log has);
3. **throughput**: a pool of concurrent clients (each with a kept-alive
   connection, renewed every :data:`RENEW_EVERY` requests so that the workers
   share the load; a minimal asyncio HTTP/1.1 client with requests encoded in
   advance, so the load generator takes little of the machine), requests/s and
   the latencies under that load; for both phases, the service's own CPU time per request
   (``/proc/<pid>/stat``, all its processes), which other load on the machine
   does not distort;
4. the RSS of the service: the uvicorn process and all its descendants
   (``VmRSS`` from ``/proc/<pid>/status``), now and at peak (``VmHWM``).

Every request is a shipped eval incident (crash log, hardware, model, command);
any status other than 200 counts as an error. Everything is bounded in count and
time (``--requests``, ``--latency-requests``, ``--max-seconds``, warm-up limits).
The naive-RAG baseline (:class:`~evals.baselines.RagBaseline`) is
timed in-process on the same incidents, for comparison. The service reads the KB
given by ``--kb-dir`` (default ``TRIAGE_KB_DIR``, else the test suite's KB) through
a scratch folder of symlinks, so its triage records do not land in that KB.
Results go to ``bench/results/triage.json``; targets are never relaxed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from bench.common import percentile, test_kb_dir  # noqa: E402

TARGETS = {"p50_ms": 30.0, "p99_ms": 150.0, "rps": 100.0, "rss_mb": 1024.0}

#: hardware facts the unseen phase rotates through (profile names of kb/hardware.py)
UNSEEN_HARDWARE = [
    "h100-x8",
    "h200-x8",
    "b200-x8",
    "a100-x8",
    "h20-x8",
    "rtx-pro-6000-x8",
    "l40s-x4",
    "mi300x-x8",
]


_MODEL_PATH = re.compile(r"(--model-path|--model)([ =])(\S+)")


def unseen_bodies(bodies: list[dict], n: int, new_paths: bool = False) -> list[dict]:
    """``n`` request bodies, none equal to any other or to ``bodies``: body ``i`` is
    ``bodies[i % len]`` with its command line extended by flags that validation accepts
    everywhere but that make the command new (``--served-model-name bench-<i>``,
    ``--random-seed <i>``) and, when the body declares hardware, the next profile of
    :data:`UNSEEN_HARDWARE` (only profiles this KB knows). The command is sent as the
    request's ``command`` field (it then overrides a command found in the log).

    ``new_paths``: the model path also moves under a folder of its own
    (``/srv/bench-<i>/`` + the path), as nearly every real log's path is new to the
    service; the model stays the same (the known-model table matches a path's last two
    components or its folder name)."""
    from evals.incidents import load_incidents
    from kb.hardware import PROFILES

    hardware = [h for h in UNSEEN_HARDWARE if h in PROFILES]
    commands = {inc.crash_log: inc.command for inc in load_incidents()}
    out: list[dict] = []
    for i in range(n):
        body = dict(bodies[i % len(bodies)])
        base = body.get("command") or commands.get(body["log"]) or ""
        base = base if isinstance(base, str) else " ".join(base)
        if new_paths:
            base = _MODEL_PATH.sub(rf"\1\2/srv/bench-{i}/\3", base, count=1).replace(
                f"/srv/bench-{i}//", f"/srv/bench-{i}/"
            )
        body["command"] = f"{base} --served-model-name bench-{i} --random-seed {i}".strip()
        if body.get("hardware") and hardware:
            body["hardware"] = hardware[i % len(hardware)]
        out.append(body)
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _incidents(limit: int) -> list[Any]:
    from evals.incidents import load_incidents

    return load_incidents()[:limit]


def _bodies(incidents: list[Any]) -> list[dict]:
    """Request bodies exactly as the eval runner sends them."""
    from evals.runner import request_for

    return [request_for(inc) for inc in incidents]


def default_kb_dir() -> Path:
    """``TRIAGE_KB_DIR`` when set, else the test suite's KB."""
    if os.environ.get("TRIAGE_KB_DIR"):
        return Path(os.environ["TRIAGE_KB_DIR"])
    return test_kb_dir()


def _releases(kb_dir: Path) -> list[str]:
    db = kb_dir / "index.sqlite"
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT version FROM releases ORDER BY version")]
    finally:
        con.close()


def scratch_kb(kb_dir: Path, into: Path) -> Path:
    """A KB folder whose index, vectors and rule cache are ``kb_dir``'s (symlinks), with
    its own ``records.sqlite`` (the service stores every triage there)."""
    into.mkdir(parents=True, exist_ok=True)
    for name in ("index.sqlite", "chroma", "rules"):
        if (kb_dir / name).exists() and not (into / name).exists():
            (into / name).symlink_to((kb_dir / name).resolve())
    return into


# ----------------------------------------------------------------------------- RSS


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _maps_torch(pid: int) -> bool:
    """Has ``pid`` loaded torch (it should not: the service embeds queries in NumPy)?"""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return any("libtorch" in line for line in fh)
    except OSError:
        return False


def rss(pid: int) -> dict[str, Any]:
    """RSS of ``pid`` and its descendants: total and peak (MB), their PSS, per process, and
    which processes hold torch (the service should not: queries are embedded in NumPy)."""
    pids = [pid, *_children(pid)]
    per = {p: round(_status_kb(p, "VmRSS") / 1024, 1) for p in pids}
    peak = {p: round(_status_kb(p, "VmHWM") / 1024, 1) for p in pids}
    return {
        "rss_mb": round(sum(per.values()), 1),
        "peak_rss_mb": round(sum(peak.values()), 1),
        # PSS counts a page shared by n processes (libraries, the memory-mapped model) 1/n
        # times: what the service really occupies. The target is judged on RSS.
        "pss_mb": round(sum(_pss_kb(p) for p in pids) / 1024, 1),
        "processes": len(pids),
        "per_process_mb": {str(p): v for p, v in per.items()},
        "with_torch": [str(p) for p in pids if _maps_torch(p)],
    }


def _pss_kb(pid: int) -> int:
    """Proportional set size of ``pid`` in kB (``/proc/<pid>/smaps_rollup``; 0 if gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (from /proc/<pid>/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


# ---------------------------------------------------------------------------- load


def _requests(url: str, bodies: list[dict]) -> list[bytes]:
    """Each body as a complete, pre-encoded ``POST /triage`` HTTP/1.1 request (keep-alive)."""
    host = url.split("://", 1)[1]
    out = []
    for body in bodies:
        data = json.dumps(body).encode()
        head = (
            f"POST /triage?replay=false HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        out.append(head.encode() + data)
    return out


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> int:
    """Send one request on a kept-alive connection; read the whole response; its status."""
    writer.write(request)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length, chunked = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
        elif name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if not chunked:
        await reader.readexactly(length)
        return status
    while (size := int((await reader.readline()).strip() or b"0", 16)) > 0:
        await reader.readexactly(size + 2)
    await reader.readline()
    return status


#: Requests a load client sends on one connection before it opens a new one. uvicorn's
#: workers share one listening socket and a kept-alive connection stays with the worker
#: that accepted it, so 8 long-lived connections may all land on one worker; renewed
#: connections are accepted by whichever worker is free, as behind a load balancer.
RENEW_EVERY = 16


async def _load(
    url: str,
    bodies: list[dict],
    total: int,
    concurrency: int,
    max_s: float,
    timeout_s: float = 60.0,
    reconnect: bool = False,
    renew_every: int = RENEW_EVERY,
) -> dict:
    """``total`` requests (bounded by ``max_s``) from ``concurrency`` clients, each with its
    own keep-alive connection, renewed every ``renew_every`` requests (every request with
    ``reconnect``), which spreads requests over the workers. The client is a minimal asyncio
    HTTP/1.1 one with requests encoded in advance, so that the load generator spends little
    of the machine's CPU."""
    host, port = url.split("://", 1)[1].split(":")
    encoded = _requests(url, bodies)
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    sent = 0
    deadline = time.monotonic() + max_s

    async def worker() -> None:
        nonlocal sent
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        on_conn = 0
        while sent < total and time.monotonic() < deadline:
            request = encoded[sent % len(encoded)]
            sent += 1
            t = time.perf_counter()
            try:
                if conn is None:
                    conn = await asyncio.open_connection(host, int(port))
                code = str(await asyncio.wait_for(_exchange(*conn, request), timeout_s))
            except (
                OSError,
                ValueError,
                IndexError,
                asyncio.IncompleteReadError,
                asyncio.TimeoutError,
            ) as exc:
                code = type(exc).__name__
                if conn is not None:
                    conn[1].close()
                conn = None
            latencies.append((time.perf_counter() - t) * 1000)
            statuses[code] = statuses.get(code, 0) + 1
            on_conn += 1
            if conn is not None and (reconnect or on_conn >= renew_every):
                conn[1].close()
                conn, on_conn = None, 0
        if conn is not None:
            conn[1].close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    errors = sum(n for code, n in statuses.items() if code != "200")
    return {
        "requests": len(latencies),
        "concurrency": concurrency,
        "requests_per_connection": 1 if reconnect else renew_every,
        "errors": errors,
        "statuses": statuses,
        "wall_s": round(wall, 2),
        "rps": round(len(latencies) / wall, 1) if wall else 0.0,
        "p50_ms": percentile(latencies, 0.5),
        "p95_ms": percentile(latencies, 0.95),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": percentile(latencies, 1.0),
        "mean_ms": round(statistics.fmean(latencies), 2) if latencies else None,
    }


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the service was not ready within {timeout_s:.0f} s")


def _warm(url: str, bodies: list[dict], workers: int, max_passes: int, max_s: float) -> list[dict]:
    """Passes over every body (``workers`` clients) until one is fast or the limits are hit."""
    passes: list[dict] = []
    deadline = time.monotonic() + max_s
    while len(passes) < max_passes and time.monotonic() < deadline:
        r = asyncio.run(
            _load(
                url,
                bodies,
                len(bodies) * workers,
                workers,
                max(1.0, deadline - time.monotonic()),
                reconnect=True,
            )
        )
        passes.append(
            {k: r[k] for k in ("requests", "errors", "statuses", "p50_ms", "p99_ms", "max_ms")}
        )
        # several passes with several workers: each worker must have seen each body
        if (
            len(passes) >= workers
            and r["p99_ms"] is not None
            and r["p99_ms"] <= TARGETS["p99_ms"]
            and not r["errors"]
        ):
            break
    return passes


def run_workers(workers: int, bodies: list[dict], kb_dir: Path, args: argparse.Namespace) -> dict:
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_LLM")}
    env.update(
        HF_HUB_OFFLINE="1",
        ANONYMIZED_TELEMETRY="False",
        TRIAGE_KB_DIR=str(kb_dir),
        TRIAGE_REPLAY_ENABLED="false",
        TRIAGE_API_KEYS="[]",
        TRIAGE_TRIAGE_RATE_PER_MINUTE="0",
    )  # throughput, not the rate limit
    log_path = kb_dir / "serve.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli.main",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {"workers": workers}
    try:
        t0 = time.perf_counter()
        _wait_ready(url, proc, args.start_timeout)
        out.update(startup_s=round(time.perf_counter() - t0, 1), rss_idle=rss(proc.pid))
        t0 = time.perf_counter()
        out["warmup"] = _warm(url, bodies, workers, args.warm_passes, args.warm_seconds)
        out["warmup_s"] = round(time.perf_counter() - t0, 1)
        phases = [("latency", bodies, args.latency_requests, 1)]
        if workers == 1 and args.unseen_requests:
            n = args.unseen_requests
            phases.append(("unseen", unseen_bodies(bodies, n), n, 1))
            # the same with the model under a path never seen before, as in real logs
            phases.append(("unseen_paths", unseen_bodies(bodies, n, new_paths=True), n, 1))
        phases.append(("throughput", bodies, args.requests, args.concurrency))
        for phase, sent, n, conc in phases:
            c0 = cpu_s(proc.pid)
            out[phase] = asyncio.run(_load(url, sent, n, conc, args.max_seconds))
            # the service's own CPU per request: a capacity measure that other load on the
            # machine (and the load generator) does not distort
            used = cpu_s(proc.pid) - c0
            out[phase]["service_cpu_ms_per_request"] = round(
                used * 1000 / max(1, out[phase]["requests"]), 2
            )
        out["rss"] = rss(proc.pid)
        lat, thr = out["latency"], out["throughput"]
        out["met"] = {
            "p50_ms": lat["p50_ms"] is not None and lat["p50_ms"] <= TARGETS["p50_ms"],
            "p99_ms": lat["p99_ms"] is not None and lat["p99_ms"] <= TARGETS["p99_ms"],
            "rps": thr["rps"] >= TARGETS["rps"],
            "errors": lat["errors"] == 0 and thr["errors"] == 0,
            "rss_mb": out["rss"]["peak_rss_mb"] <= TARGETS["rss_mb"],
        }
        for phase in ("unseen", "unseen_paths"):  # never seen before: the same targets
            if phase not in out:
                continue
            new = out[phase]
            out["met"][f"{phase}_p50_ms"] = (
                new["p50_ms"] is not None and new["p50_ms"] <= TARGETS["p50_ms"]
            )
            out["met"][f"{phase}_p99_ms"] = (
                new["p99_ms"] is not None and new["p99_ms"] <= TARGETS["p99_ms"]
            )
            out["met"]["errors"] = out["met"]["errors"] and new["errors"] == 0
        return out
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()
        if any(
            p.get("errors")
            for p in [
                *out.get("warmup", []),
                out.get("latency", {}),
                out.get("unseen", {}),
                out.get("unseen_paths", {}),
                out.get("throughput", {}),
            ]
        ):
            out["server_errors"] = _error_lines(log_path)


def _error_lines(path: Path, limit: int = 40) -> list[str]:
    """The service log's lines about failures (the last ``limit``)."""
    marks = ("Error", "Exception", "Traceback", "error", " 500 ", " 422 ", " 503 ")
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [ln[:300] for ln in lines if any(m in ln for m in marks)][-limit:]


def rag_baseline(kb_dir: Path, incidents: list[Any], limit: int, max_s: float) -> dict:
    """In-process latency of the naive-RAG baseline (warm: index built first, timed apart)."""
    from evals.baselines import RagBaseline
    from kb.knowledge import KnowledgeBase
    from service.settings import Settings

    kb = KnowledgeBase(Settings(kb_dir=kb_dir, chroma_url=None))
    rag = RagBaseline(kb)
    todo = incidents[:limit]
    t0 = time.perf_counter()
    if todo:
        rag.predict(todo[0])  # builds the release's index and loads the embedder
    build_s = time.perf_counter() - t0
    latencies: list[float] = []
    deadline = time.monotonic() + max_s
    for inc in todo:
        if time.monotonic() > deadline:
            break
        t = time.perf_counter()
        rag.predict(inc)
        latencies.append((time.perf_counter() - t) * 1000)
    kb.close()
    return {
        "incidents": len(latencies),
        "first_call_s": round(build_s, 1),
        "p50_ms": percentile(latencies, 0.5),
        "p95_ms": percentile(latencies, 0.95),
        "p99_ms": percentile(latencies, 0.99),
        "note": "in-process, after the first call (index build, embedder load); "
        "later calls may still embed other releases' chunks",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=600, help="throughput phase, per run")
    ap.add_argument("--latency-requests", type=int, default=300, help="latency phase, per run")
    ap.add_argument(
        "--unseen-requests",
        type=int,
        default=300,
        help="requests of never-seen logs, one client (1-worker run; 0: skip)",
    )
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-seconds", type=float, default=60, help="per phase")
    ap.add_argument("--warm-passes", type=int, default=6)
    ap.add_argument("--warm-seconds", type=float, default=600)
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument(
        "--workers", type=int, default=os.cpu_count() or 2, help="N of the N-worker run"
    )
    ap.add_argument("--bodies", type=int, default=100, help="at most this many incidents")
    ap.add_argument("--kb-dir", type=Path, default=None)
    ap.add_argument("--rag", type=int, default=40, help="incidents for the RAG baseline (0: skip)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "triage.json"))
    args = ap.parse_args()
    kb_dir = (args.kb_dir or default_kb_dir()).resolve()
    releases = _releases(kb_dir)
    if not releases:
        sys.exit(f"the KB at {kb_dir} holds no releases: ingest first or pass --kb-dir")
    incidents = _incidents(args.bodies)
    bodies = _bodies(incidents)
    results: dict[str, Any] = {
        "targets": TARGETS,
        "kb": str(kb_dir),
        "releases": releases,
        "bodies": len(bodies),
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as tmp:
        for w in sorted({1, args.workers}):
            served = scratch_kb(kb_dir, Path(tmp) / f"kb-{w}")
            results["runs"].append(run_workers(w, bodies, served, args))
            print(json.dumps(results["runs"][-1], indent=2), flush=True)
    if args.rag:
        results["rag_baseline"] = rag_baseline(kb_dir, incidents, args.rag, args.max_seconds * 2)
    results["loadavg_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
