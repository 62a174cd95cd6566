"""Benchmark of the team setup (issue #21): PostgreSQL records, a Chroma server, several
API workers and ``sglang-triage replay-worker`` processes, against the embedded default.

1. **Triage throughput.** The same KB, logs and client load against

   * ``embedded``: ``sglang-triage serve`` (one worker), records in SQLite
     (``<kb>/records.sqlite``), the embedded Chroma (``<kb>/chroma``);
   * ``postgres``: ``sglang-triage serve --workers 4`` with ``TRIAGE_DATABASE_URL`` on a
     real PostgreSQL started here (``initdb`` in a temporary folder, as
     ``tests/service/team/pg.py`` does) and ``TRIAGE_CHROMA_URL`` on a real ``chroma run``
     server started here (serve refuses several workers with the embedded Chroma).

   Replay is off (``TRIAGE_REPLAY_ENABLED=false``), as is on-demand ingest. Each service is
   warmed, then :data:`CONCURRENCY` clients post the bodies for :data:`SECONDS` seconds (the
   load generator of ``bench/triage_bench.py``: pre-encoded HTTP/1.1 requests on kept-alive
   connections renewed every 16 requests so that uvicorn's workers share the load).
   Reported: requests/s, p50/p95/p99 latency, errors, and the CPU time per request of the
   service, of PostgreSQL and of the Chroma server (``/proc``), which other load on the
   machine does not distort.

2. **Replay jobs per minute** with 1 and with 2 ``replay-worker`` processes on that
   PostgreSQL: a ``serve`` with replay on (``TRIAGE_REPLAY_QUEUE=database``) is posted
   ``--replay-jobs`` crash logs of one release (generated eval incidents, each a different
   command line, so no two share a job), and the time from the first post until every job
   is done is measured (the API answers those logs once beforehand, without replay, so the
   posts are warm). The replay is the real one (bubblewrap sandbox, the release's own
   validation). Each command gets ``--random-seed <nonce>`` appended (a flag SGLang's
   validation does not read) so that no replay is answered from the workers' disk cache
   (``<home>/replay-cache``, keyed by the command line) of an earlier run; the release
   trees (``<home>/replay-trees``) are reused, as on a worker that has served the release.

The KB is a copy of ``--kb-dir`` (default: the test suite's KB, ``bench/common.py
test_kb_dir()``): ``index.sqlite`` copied with SQLite's backup API and ``rules/`` copied
into a temporary folder; the vectors of its embedded Chroma are read from a copy and
loaded, identically, into the copy's embedded Chroma and into the Chroma server (releases
without vectors are searched by keywords, in both setups). Results go to
``bench/results/team.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from bench.common import percentile, test_kb_dir  # noqa: E402
from bench.triage_bench import (  # noqa: E402
    _error_lines,
    _load,
    _port,
    _releases,
    _wait_ready,
    _warm,
    cpu_s,
    rss,
)

CONCURRENCY = 8
SECONDS = 20.0
INCIDENTS = ROOT / "evals" / "incidents" / "generated.jsonl"
EXAMPLES = {"seed_attempt1.log": "0.5.11", "seed_attempt2.log": "0.5.11"}


# ------------------------------------------------------------------------------ inputs


def _incidents() -> list[dict[str, Any]]:
    """The generated eval incidents (read as JSON lines, not through ``evals``)."""
    return [json.loads(line) for line in INCIDENTS.read_text().splitlines() if line.strip()]


def triage_bodies(releases: list[str], per_release: int) -> list[dict[str, Any]]:
    """The shipped example logs and ``per_release`` generated incidents of each release of
    the KB, as ``POST /triage`` JSON bodies (release given: nothing is ingested on demand)."""
    bodies = [
        {
            "log": (ROOT / "examples" / name).read_text(),
            "release": rel,
            "hardware": "rtx-pro-6000-x8",
        }
        for name, rel in EXAMPLES.items()
        if rel in releases
    ]
    taken: dict[str, int] = {}
    for inc in _incidents():
        rel = inc["release"]
        if rel not in releases or taken.get(rel, 0) >= per_release:
            continue
        taken[rel] = taken.get(rel, 0) + 1
        bodies.append(_body(inc, inc["crash_log"]))
    return bodies


def _body(inc: dict[str, Any], log: str) -> dict[str, Any]:
    body = {"log": log, "release": inc["release"]}
    for key in ("hardware", "model", "model_arch"):
        if inc.get(key):
            body[key] = inc[key]
    return body


def with_seed(log: str, seed: int) -> str | None:
    """``log`` with ``--random-seed seed`` appended to its ``$ python -m sglang...`` line
    (None when the log has no such line)."""
    lines = log.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("$ ") and "sglang.launch_server" in line:
            lines[i] = f"{line.rstrip()} --random-seed {seed}"
            return "\n".join(lines)
    return None


# --------------------------------------------------------------------------------- KB


def copy_kb(src: Path, dst: Path) -> dict[str, Any]:
    """``src``'s index (SQLite backup API) and rules into ``dst``; a copy of its embedded
    Chroma into ``dst/../chroma-source`` (to read the vectors from)."""
    dst.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _backup(src / "index.sqlite", dst / "index.sqlite")
    if (src / "rules").is_dir():
        shutil.copytree(src / "rules", dst / "rules")
    chroma_src = dst.parent / "chroma-source"
    if (src / "chroma" / "chroma.sqlite3").exists():
        chroma_src.mkdir()
        _backup(src / "chroma" / "chroma.sqlite3", chroma_src / "chroma.sqlite3")
        for seg in (src / "chroma").iterdir():
            if seg.is_dir():
                shutil.copytree(seg, chroma_src / seg.name)
    return {
        "source": str(src),
        "copy_s": round(time.perf_counter() - t0, 1),
        "index_mb": round((dst / "index.sqlite").stat().st_size / 2**20, 1),
    }


def _backup(src: Path, dst: Path) -> None:
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    target = sqlite3.connect(dst)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def copy_vectors(src: str, *dests: str) -> None:
    """Every vector of the embedded Chroma at ``src`` into each of ``dests`` (a folder: an
    embedded Chroma; ``http://…``: a server). Run in a subprocess (see :func:`load_vectors`):
    the embedded Chroma must not stay open in the bench while a service opens it."""
    from kb.vectors import VectorStore

    source = VectorStore(path=Path(src))
    targets = [
        VectorStore(url=d) if d.startswith("http") else VectorStore(path=Path(d)) for d in dests
    ]
    total, n, per_release = source.collection.count(), 0, {}
    for offset in range(0, total, 1000):
        got = source.collection.get(include=["embeddings", "metadatas"], limit=1000, offset=offset)
        for target in targets:
            target.upsert(got["ids"], got["embeddings"], got["metadatas"])
        n += len(got["ids"])
        for meta in got["metadatas"]:
            rel = (meta or {}).get("release")
            per_release[rel] = per_release.get(rel, 0) + 1
    counts = [t.collection.count() for t in targets]
    print(json.dumps({"vectors": n, "per_release": per_release, "target_counts": counts}))


def load_vectors(src: Path, *dests: str) -> dict[str, Any]:
    if not (src / "chroma.sqlite3").exists():
        return {"vectors": 0, "note": "the KB has no embedded Chroma: keyword search only"}
    code = "import sys; from bench.team_bench import copy_vectors; copy_vectors(*sys.argv[1:])"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(src), *dests],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    if proc.returncode != 0:
        return {
            "vectors": 0,
            "error": proc.stderr.strip()[-1500:],
            "note": "vectors not loaded: search falls back to keywords",
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------- processes


class Proc:
    """A subprocess in its own session, its output in a file; stopped with its group."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.out = log.open("wb")
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.out.close()


def triage_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli.main", *args]


@contextlib.contextmanager
def chroma_server(path: Path, log: Path) -> Iterator[tuple[str, Proc]]:
    """``chroma run`` (the venv's) on a free loopback port, its data in ``path``."""
    port = _port()
    exe = Path(sys.executable).parent / "chroma"
    proc = Proc(
        [
            str(exe) if exe.exists() else "chroma",
            "run",
            "--path",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        {**os.environ, "ANONYMIZED_TELEMETRY": "False"},
        log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=2).status_code == 200:
                    break
            if proc.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chroma run did not start: {proc.text()[-2000:]}")
            time.sleep(0.3)
        yield url, proc
    finally:
        proc.stop()


def base_env(kb_dir: Path) -> dict[str, str]:
    drop = (
        "TRIAGE_LLM",
        "TRIAGE_SLACK",
        "TRIAGE_DATABASE_URL",
        "TRIAGE_CHROMA_URL",
        "TRIAGE_REPLAY",
        "TRIAGE_API_KEYS",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        HF_HUB_OFFLINE="1",
        ANONYMIZED_TELEMETRY="False",
        TRIAGE_KB_DIR=str(kb_dir),
        TRIAGE_API_KEYS="[]",
        TRIAGE_ON_DEMAND_INGEST="false",
        TRIAGE_ON_DEMAND_EMBED="false",
        TRIAGE_TRIAGE_RATE_PER_MINUTE="0",
    )  # throughput, not the rate limit
    return env


def _postmaster_pid(data: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((data / "postmaster.pid").read_text().split()[0])
    return None


# ------------------------------------------------------------------------ throughput


def throughput(
    name: str,
    workers: int,
    env: dict[str, str],
    bodies: list[dict[str, Any]],
    backends: dict[str, int],
    logs: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Serve with ``workers``, warm it, then load it for ``args.seconds``."""
    port = _port()
    url = f"http://127.0.0.1:{port}"
    log = logs / f"serve-{name}.log"
    proc = Proc(triage_cli("serve", "--port", str(port), "--workers", str(workers)), env, log)
    out: dict[str, Any] = {"setup": name, "workers": workers}
    try:
        t0 = time.perf_counter()
        _wait_ready(url, proc.proc, args.start_timeout)
        out["startup_s"] = round(time.perf_counter() - t0, 1)
        out["readyz"] = httpx.get(f"{url}/readyz", timeout=30).json()
        t0 = time.perf_counter()
        warm = _warm(url, bodies, workers, max_passes=max(6, workers + 2), max_s=120)
        out["warmup"] = {
            "passes": len(warm),
            "s": round(time.perf_counter() - t0, 1),
            "last": warm[-1] if warm else None,
        }
        c0 = cpu_s(proc.pid)
        b0 = {k: cpu_s(pid) for k, pid in backends.items()}
        load = asyncio.run(_load(url, bodies, 10**9, args.concurrency, args.seconds))
        n = max(1, load["requests"])
        load["service_cpu_ms_per_request"] = round((cpu_s(proc.pid) - c0) * 1000 / n, 2)
        for k, pid in backends.items():
            load[f"{k}_cpu_ms_per_request"] = round((cpu_s(pid) - b0[k]) * 1000 / n, 2)
        out["load"] = load
        out["rss"] = {k: v for k, v in rss(proc.pid).items() if k != "per_process_mb"}
        # one answer, to show what the service did (vector search or keyword fallback)
        one = httpx.post(f"{url}/triage?replay=false", json=bodies[0], timeout=60).json()
        out["sample"] = {
            "status": one.get("status"),
            "degraded": one.get("degraded"),
            "release": (one.get("release") or {}).get("release"),
        }
        return out
    finally:
        proc.stop()
        if out.get("load", {}).get("errors") or "load" not in out:
            out["server_errors"] = _error_lines(log)


# ---------------------------------------------------------------------------- replay


def replay_runs(
    db_url: str, env: dict[str, str], logs: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Jobs per minute with 1 and 2 replay workers (see the module doc)."""
    from kb.records import Records
    from service.replay.jobs import JobQueue

    port = _port()
    url = f"http://127.0.0.1:{port}"
    serve_env = {**env, "TRIAGE_REPLAY_ENABLED": "true", "TRIAGE_REPLAY_QUEUE": "database"}
    api = Proc(triage_cli("serve", "--port", str(port)), serve_env, logs / "serve-replay.log")
    queue = JobQueue(Records(db_url).engine)
    release = args.replay_release
    candidates = [
        inc
        for inc in _incidents()
        if inc["release"] == release and with_seed(inc["crash_log"], 0) is not None
    ]
    out: dict[str, Any] = {"release": release, "jobs_per_run": args.replay_jobs, "runs": []}
    chosen: list[str] = []
    nonce = int(time.time()) % 100_000 * 1000
    try:
        _wait_ready(url, api.proc, args.start_timeout)
        for inc in candidates[: 2 * args.replay_jobs]:  # warm the engine: no job is made
            httpx.post(f"{url}/triage?replay=false", json=_body(inc, inc["crash_log"]), timeout=120)
        for n_workers in args.replay_workers:
            order = [c for c in candidates if c["id"] in chosen] + [
                c for c in candidates if c["id"] not in chosen
            ]
            nonce += 100
            run = _replay_run(url, queue, env, order, nonce, n_workers, logs, args)
            chosen = chosen or run["incidents"]
            out["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "jobs"}, indent=2), flush=True)
    finally:
        api.stop()
    return out


def _replay_run(
    url: str,
    queue: Any,
    env: dict[str, str],
    candidates: list[dict[str, Any]],
    nonce: int,
    n_workers: int,
    logs: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    workers = [
        Proc(
            triage_cli("replay-worker", "--poll", "0.5"), env, logs / f"worker-{n_workers}-{i}.log"
        )
        for i in range(n_workers)
    ]
    run: dict[str, Any] = {"replay_workers": n_workers}
    try:
        deadline = time.monotonic() + 120
        while not all("replay worker " in w.text() for w in workers):
            dead = [w for w in workers if w.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"a replay worker did not start: {(dead or workers)[0].text()}")
            time.sleep(0.2)
        before = {j["id"] for j in queue.jobs()}
        posted: list[tuple[str, str]] = []
        t0 = time.time()
        for i, inc in enumerate(candidates):
            if len(posted) >= args.replay_jobs:
                break
            log = with_seed(inc["crash_log"], nonce + i)
            r = httpx.post(f"{url}/triage", json=_body(inc, log or ""), timeout=120)
            if r.status_code == 200 and (r.json().get("replay") or {}).get("status") == "pending":
                posted.append((inc["id"], r.json()["id"]))
        run["enqueue_s"] = round(time.time() - t0, 2)
        new = [j for j in queue.jobs() if j["id"] not in before]
        run["incidents"] = [p[0] for p in posted]
        run["jobs"] = len(new)
        deadline = time.monotonic() + args.replay_timeout
        while True:
            rows = [j for j in queue.jobs() if j["id"] not in before]
            if all(j["state"] in ("done", "failed") for j in rows):
                break
            if time.monotonic() > deadline:
                run["timed_out"] = [j["id"] for j in rows if j["state"] not in ("done", "failed")]
                break
            time.sleep(0.25)
        finished = [j["finished"] for j in rows if j["finished"]]
        wall = (max(finished) - t0) if finished else None
        run["wall_s"] = round(wall, 1) if wall else None
        done = sum(j["state"] == "done" for j in rows)
        run["jobs_done"], run["jobs_failed"] = done, sum(j["state"] == "failed" for j in rows)
        run["jobs_per_minute"] = round(done * 60 / wall, 2) if wall else None
        runs = [j["finished"] - j["claimed_at"] for j in rows if j["finished"] and j["claimed_at"]]
        waits = [j["claimed_at"] - j["created"] for j in rows if j["claimed_at"]]
        run["job_run_s"] = {
            "p50": percentile(runs, 0.5),
            "max": percentile(runs, 1.0),
            "each": [round(s, 1) for s in runs],
        }
        run["job_wait_s"] = {"p50": percentile(waits, 0.5), "max": percentile(waits, 1.0)}
        run["argvs_per_job"] = [len(json.loads(j["spec"])["argvs"]) for j in rows]
        run["seeded"] = all("--random-seed" in json.loads(j["spec"])["argvs"][0] for j in rows)
        run["errors"] = [j["error"] for j in rows if j["error"]][:5]
        verdicts: dict[str, int] = {}
        for _, tid in posted:
            rec = httpx.get(f"{url}/triage/{tid}", timeout=30).json()
            status = ((rec.get("result") or {}).get("replay") or {}).get("status", "?")
            verdicts[status] = verdicts.get(status, 0) + 1
        run["verdicts"] = verdicts
        return run
    finally:
        for w in workers:
            w.stop(timeout=60)


# ------------------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb-dir", type=Path, default=None, help="default: the test suite's KB")
    ap.add_argument("--workers", type=int, default=4, help="API workers of the team setup")
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY)
    ap.add_argument("--seconds", type=float, default=SECONDS, help="load per setup")
    ap.add_argument("--per-release", type=int, default=3, help="generated incidents a release")
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument("--replay-jobs", type=int, default=6, help="0: skip the replay part")
    ap.add_argument("--replay-workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--replay-release", default="0.5.11")
    ap.add_argument("--replay-timeout", type=float, default=900, help="per run")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "team.json"))
    args = ap.parse_args()

    from tests.service.team.pg import PostgresServer, find_bindir  # the suite's PostgreSQL

    bindir = find_bindir()
    if bindir is None:
        sys.exit("PostgreSQL server binaries missing (/usr/lib/postgresql/*/bin/initdb)")
    src = (args.kb_dir or test_kb_dir()).resolve()
    releases = _releases(src)
    if not releases:
        sys.exit(f"the KB at {src} holds no releases: run the tests (or ingest) first")
    bodies = triage_bodies(releases, args.per_release)
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "releases": releases,
        "bodies": len(bodies),
        "body_releases": sorted({b["release"] for b in bodies}),
        "concurrency": args.concurrency,
        "seconds": args.seconds,
    }
    with tempfile.TemporaryDirectory(prefix="triage-team-bench-") as tmp_name:
        tmp = Path(tmp_name)
        logs = tmp / "logs"
        logs.mkdir()
        kb_dir = tmp / "kb"
        results["kb"] = copy_kb(src, kb_dir)
        with (
            PostgresServer(bindir) as pg,
            chroma_server(tmp / "chroma-server", logs / "chroma.log") as (chroma_url, chroma),
        ):
            db_url = pg.new_database()
            results["vectors"] = load_vectors(
                tmp / "chroma-source", str(kb_dir / "chroma"), chroma_url
            )
            print(json.dumps(results, indent=2), flush=True)
            backends = {"chroma": chroma.pid}
            pm = _postmaster_pid(pg.data)
            if pm:
                backends["postgres"] = pm
            env = base_env(kb_dir)
            team_env = {**env, "TRIAGE_DATABASE_URL": db_url, "TRIAGE_CHROMA_URL": chroma_url}
            off = {"TRIAGE_REPLAY_ENABLED": "false"}
            results["throughput"] = []
            for name, workers, e in (
                ("embedded", 1, {**env, **off}),
                ("postgres", args.workers, {**team_env, **off}),
            ):
                # the embedded run's backends are in-process; the servers idle meanwhile
                run = throughput(name, workers, e, bodies, backends, logs, args)
                results["throughput"].append(run)
                print(json.dumps(run, indent=2), flush=True)
            if args.replay_jobs > 0:
                results["replay"] = replay_runs(db_url, team_env, logs, args)
        results["loadavg_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    summary = {
        r["setup"]: {k: r["load"].get(k) for k in ("rps", "p50_ms", "p95_ms", "errors")}
        for r in results["throughput"]
        if "load" in r
    }
    for run in (results.get("replay") or {}).get("runs", []):
        summary[f"replay x{run['replay_workers']}"] = {
            k: run.get(k) for k in ("jobs_done", "wall_s", "jobs_per_minute", "verdicts")
        }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
