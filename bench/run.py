"""``make bench``: run every benchmark; JSON results land in bench/results/."""

from __future__ import annotations

import subprocess
import sys

SCRIPTS = [
    ["bench/ingest_bench.py"],
    ["bench/triage_bench.py"],
]


def main() -> None:
    failed = 0
    for script in SCRIPTS:
        print(f"== {' '.join(script)}", flush=True)
        failed += subprocess.run([sys.executable, *script], check=False).returncode != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
