"""``make bench``: run every benchmark; JSON results land in bench/results/.

``BENCH_ALL=1`` (``make bench BENCH_ALL=1``) adds ``bench/ingest_all.py``: the structural
ingest of every release since 0.5.0, about 15 minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPTS = [
    ["bench/ingest_bench.py"],
    ["bench/triage_bench.py"],
    ["bench/ondemand_bench.py"],
    ["bench/team_bench.py"],
    ["bench/search_bench.py"],
    ["bench/replay_pool_bench.py"],
    ["bench/redos_bench.py"],
    ["bench/run_preflight_bench.py"],
    ["bench/serve_bench.py"],
]


#: Run only when ``BENCH_ALL`` is set to 1 (they take a quarter of an hour).
LONG_SCRIPTS = [
    ["bench/ingest_all.py"],
]


def main() -> None:
    failed = 0
    scripts = SCRIPTS + (LONG_SCRIPTS if os.environ.get("BENCH_ALL") == "1" else [])
    for script in scripts:
        print(f"== {' '.join(script)}", flush=True)
        failed += subprocess.run([sys.executable, *script], check=False).returncode != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
