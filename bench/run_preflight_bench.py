"""Benchmark (issue 29): what ``sglang-triage run`` costs before SGLang starts.

Measured with a warm KB (the test suite's, or ``--kb-dir``):

1. **pre-flight, in process**: :func:`service.watch.run.preflight` (the rule-card lint of
   the command against its release and facts) on the launch commands of the shipped eval
   incidents whose release the KB holds, after one warm-up pass over them; p50/p95/max ms;
2. **facts**: :func:`service.watch.facts.gather` for a launch whose interpreter is a venv
   holding a small ``sglang`` distribution, with an ``nvidia-smi`` script on ``PATH``
   printing recorded output (the version probe is a real interpreter start);
3. **the whole wait**: ``sglang-triage run --preflight strict -- <the seed command>`` as a
   process (start-up, imports, facts, KB open, lint), which refuses the seed command with
   exit 2 before launching anything: the seconds a user waits before SGLang would start;
   and, in one more fresh process, its phases timed one by one (imports, facts, KB open,
   the first lint, a second lint). The load average is recorded with them.

Target: the pre-flight itself (facts, KB open and the first lint of a fresh process) ≤ 3 s
with a warm KB; the whole wait (which adds the interpreter's start and the CLI's imports) is
reported beside it. Results go to
``bench/results/run_preflight.json``. Everything is bounded: ``--per-release`` commands
per release, ``--process-runs`` process runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from bench.common import percentile, test_kb_dir  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "run_preflight.json"
#: the pre-flight itself (facts, KB open, the first lint of a fresh process) within 3 s; the
#: whole wait (interpreter start and the CLI's imports too) is measured and reported beside it
TARGETS = {"preflight_fresh_s": 3.0}
RTX_ROW = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 12.0, 575.57.08\n"
SEED_FLAGS = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/Kimi-K2.6-eagle3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]


def _machine(root: Path, version: str) -> tuple[str, Path]:
    """A venv with an ``sglang`` dist-info of ``version`` and a bin folder with nvidia-smi."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site = Path(purelib)
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text("raise SystemExit('should not run')\n")
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    (root / "bin").mkdir()
    smi = root / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<EOF\n" + RTX_ROW * 8 + "EOF\n")
    smi.chmod(0o755)
    return str(python), root / "bin"


def _commands(releases: set[str], per_release: int) -> list[tuple[str, list[str]]]:
    """``(release, launch argv)`` of eval incidents with a command, per release."""
    from evals.incidents import load_incidents
    from service.engine import parse_log, split_command

    out: list[tuple[str, list[str]]] = []
    count: dict[str, int] = {}
    for inc in load_incidents():
        rel = inc.expected.release
        if rel not in releases or count.get(rel, 0) >= per_release:
            continue
        argv: list[str] | None = None
        if inc.command:
            argv = split_command(inc.command if isinstance(inc.command, list) else str(inc.command))
        else:
            try:
                argv = parse_log(inc.crash_log).command
            except Exception:
                argv = None
        if argv:
            count[rel] = count.get(rel, 0) + 1
            out.append((rel, ["python", "-m", "sglang.launch_server", *argv]))
    return out


#: run in a fresh process: the phases of the whole wait, each timed
PHASES = """\
import json, os, sys, time
t0 = time.perf_counter()
import service.cli.main  # noqa: F401 - the command line's imports
t1 = time.perf_counter()
from service.settings import Settings
from service.watch.facts import gather
from service.watch.run import preflight
from service.wiring import kb_for
t2 = time.perf_counter()
argv = json.loads(sys.argv[1])
facts = gather(argv)
t3 = time.perf_counter()
settings = Settings()
kb_for(settings).store.releases()
t4 = time.perf_counter()
pre = preflight(settings, argv, facts, os.environ)
t5 = time.perf_counter()
preflight(settings, argv, facts, os.environ)
t6 = time.perf_counter()
print(json.dumps({"imports_s": round(t2 - t0, 2), "facts_s": round(t3 - t2, 2),
                  "kb_open_s": round(t4 - t3, 2), "first_lint_s": round(t5 - t4, 2),
                  "second_lint_s": round(t6 - t5, 3), "status": pre["status"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb-dir", type=Path, default=None)
    ap.add_argument("--per-release", type=int, default=10)
    ap.add_argument("--process-runs", type=int, default=3)
    args = ap.parse_args()
    kb_dir = args.kb_dir or Path(os.environ.get("TRIAGE_KB_DIR") or test_kb_dir())

    from service.settings import Settings
    from service.watch.facts import MachineFacts, gather
    from service.watch.run import preflight
    from service.wiring import kb_for

    settings = Settings(
        kb_dir=kb_dir, chroma_url=None, on_demand_ingest=False, fix_search_deadline_s=0.0
    )
    releases = {r["version"] for r in kb_for(settings).store.releases()}
    commands = _commands(releases, args.per_release)
    env = dict(os.environ)
    for _rel, argv in commands:  # warm-up pass: catalogs, cards, caches
        preflight(settings, argv, MachineFacts(release={"version": _rel, "source": "given"}), env)
    runs: list[dict] = []
    for rel, argv in commands:
        facts = MachineFacts(release={"version": rel, "source": "given"})
        t = time.perf_counter()
        pre = preflight(settings, argv, facts, env)
        runs.append(
            {
                "release": rel,
                "ms": round((time.perf_counter() - t) * 1000, 1),
                "status": pre["status"],
                "errors": len(pre.get("errors") or []),
            }
        )
    ms = [r["ms"] for r in runs]

    with tempfile.TemporaryDirectory() as tmp:
        python, bin_dir = _machine(Path(tmp), "0.5.11")
        menv = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
        seed = [python, "-m", "sglang.launch_server", *SEED_FLAGS]
        facts_ms = []
        for _ in range(3):
            t = time.perf_counter()
            facts = gather(seed, menv)
            facts_ms.append(round((time.perf_counter() - t) * 1000, 1))
        whole: list[float] = []
        codes: list[int] = []
        penv = {
            **menv,
            "TRIAGE_KB_DIR": str(kb_dir),
            "TRIAGE_ON_DEMAND_INGEST": "false",
            "TRIAGE_FIX_SEARCH_DEADLINE_S": "0",
            "HF_HUB_OFFLINE": "1",
        }
        penv.pop("TRIAGE_CHROMA_URL", None)
        for _ in range(args.process_runs):
            t = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "service.cli.main",
                    "run",
                    "--preflight",
                    "strict",
                    "--",
                    *seed,
                ],
                cwd=ROOT,
                env=penv,
                capture_output=True,
                timeout=300,
                check=False,
            )
            whole.append(round(time.perf_counter() - t, 2))
            codes.append(proc.returncode)
        phases = subprocess.run(
            [sys.executable, "-c", PHASES, json.dumps(seed)],
            cwd=ROOT,
            env=penv,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        breakdown = (
            json.loads(phases.stdout.strip().splitlines()[-1])
            if phases.returncode == 0
            else {"error": phases.stderr[-500:]}
        )

    out = {
        "kb_dir": str(kb_dir),
        "releases": sorted(releases),
        "commands": len(runs),
        "preflight_p50_ms": percentile(ms, 0.5),
        "preflight_p95_ms": percentile(ms, 0.95),
        "preflight_max_ms": max(ms) if ms else None,
        "facts_ms": facts_ms,
        "facts_found": {"release": facts.version, "hardware": facts.profile},
        "whole_wait_s": whole,
        "whole_wait_p50_s": statistics.median(whole) if whole else None,
        "whole_wait_exit_codes": codes,
        "whole_wait_phases": breakdown,
        "targets": TARGETS,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "runs": runs,
    }
    fresh = [breakdown.get(k) for k in ("facts_s", "kb_open_s", "first_lint_s")]
    out["preflight_fresh_s"] = (
        round(sum(fresh), 2) if all(isinstance(v, int | float) for v in fresh) else None
    )
    out["meets_targets"] = bool(
        out["preflight_fresh_s"] is not None
        and out["preflight_fresh_s"] <= TARGETS["preflight_fresh_s"]
        and all(c == 2 for c in codes)
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=2))
    sys.exit(0 if out["meets_targets"] else 1)


if __name__ == "__main__":
    main()
