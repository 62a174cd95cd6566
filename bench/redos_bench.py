"""Benchmark (issue 26): 1 MB adversarial bodies against a real ``sglang-triage serve``.

Each body (a run of ``-``, ``--a``, quotes, ``File "``, ``--api-key ``... the pieces of
``tests/service/hardening/test_redos.py``) is POSTed to ``/triage`` of a server on an
empty KB (so every answer is the parser's: a 4xx after reading it all), while ``/healthz``
is asked in a loop. Recorded per body: the status, the seconds to the answer, the
slowest ``/healthz`` answered meanwhile, and the CPU seconds of :func:`parse_input` in
this process. For scale, the redaction pattern before issue 26 is timed on 2-16 KB of
``-`` (it grew with the square of the length: hours for 1 MB).

Targets: every body answered with a 4xx within 15 s; ``/healthz`` never slower than 1 s.

``python bench/redos_bench.py [--out bench/results/redos.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script (bench/ is not installed)
    sys.path.insert(0, str(ROOT))

from tests.service.hardening.test_redos import MB, UNITS, _serve, adversarial  # noqa: E402

TARGET_ANSWER_S = 15.0
TARGET_HEALTHZ_S = 1.0
#: The secret-flag pattern before issue 26.
OLD_FLAGS = re.compile(
    r"(--(?:[\w-]*-)?(?:api-key|admin-api-key|hf-token|token|secret|password|access-key|secret-key))"
    r"(?=[\s=])(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)",
    re.I,
)


def _old_pattern() -> list[dict]:
    rows = []
    for kb in (2, 4, 8, 16):
        text = "-" * (kb * 1024)
        t = time.process_time()
        OLD_FLAGS.sub("", text)
        rows.append({"dashes_kb": kb, "cpu_s": round(time.process_time() - t, 3)})
    return rows


def _parse_cpu(text: str) -> float:
    from service.engine.errors import LogParseError
    from service.engine.logparse.parse import parse_input

    t = time.process_time()
    with contextlib.suppress(LogParseError):
        parse_input(text, max_bytes=2 * MB)
    return round(time.process_time() - t, 3)


def _one(url: str, unit: str) -> dict:
    text = adversarial(unit, MB)
    body = text.encode()
    out: dict = {}

    def post() -> None:
        t = time.perf_counter()
        with httpx.Client(timeout=600) as c:
            out["status"] = c.post(
                f"{url}/triage", content=body, headers={"content-type": "text/plain"}
            ).status_code
        out["answer_s"] = round(time.perf_counter() - t, 3)

    worker = threading.Thread(target=post)
    worker.start()
    health: list[float] = []
    with httpx.Client(timeout=30) as c:
        while worker.is_alive():
            t = time.perf_counter()
            c.get(f"{url}/healthz")
            health.append(time.perf_counter() - t)
    worker.join()
    return {
        "unit": unit,
        **out,
        "healthz_n": len(health),
        "healthz_max_s": round(max(health, default=0.0), 3),
        "parse_cpu_s": _parse_cpu(text),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/redos.json")
    args = ap.parse_args()
    # the server the suite's test starts (test_redos._serve): same settings, killed after
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.contextmanager(_serve)(Path(tmp)) as (url, _proc),
    ):
        rows = [_one(url, unit) for unit in UNITS]
    worst_answer = max(r["answer_s"] for r in rows)
    worst_health = max(r["healthz_max_s"] for r in rows)
    result = {
        "bodies": len(rows),
        "body_bytes": MB,
        "worst_answer_s": worst_answer,
        "worst_healthz_s": worst_health,
        "worst_parse_cpu_s": max(r["parse_cpu_s"] for r in rows),
        "targets": {"answer_s": TARGET_ANSWER_S, "healthz_s": TARGET_HEALTHZ_S},
        "ok": (
            worst_answer <= TARGET_ANSWER_S
            and worst_health <= TARGET_HEALTHZ_S
            and all(400 <= r["status"] < 500 for r in rows)
        ),
        "old_flag_pattern": _old_pattern(),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
