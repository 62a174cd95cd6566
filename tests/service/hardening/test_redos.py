"""Issue 26: no input makes a regular expression, a parse or the service run for long.

Work is bounded in CPU seconds, never wall-clock time: each probe runs in a subprocess
with ``RLIMIT_CPU`` (the kernel kills it with SIGXCPU past the limit; a busy machine does
not use it up), and the test asserts the probe ran to its end. The limits are generous:
the quadratic patterns fixed by issue 26 needed 17 CPU seconds for 16 KB of ``-`` and
would need hours for the sizes below.

* every compiled pattern (found by walking the globals of the modules that read user
  text, so a new pattern is covered without touching this file) meets runs of
  adversarial pieces, also pieces made from its own literal text;
* every parse path (:func:`parse_input`, :func:`redact`, the Slack text readers, model
  names, message normalising) reads 1 MB bodies of the same pieces;
* a real ``sglang-triage serve`` process answers ``/healthz`` while it reads them.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import pkgutil
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..api.conftest import free_port

pytestmark = pytest.mark.long_pole  # minutes: scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[3]
MB = 1_000_000

#: Pieces that are repeated into adversarial bodies: runs that made (or could make) a
#: pattern backtrack, and lines every reader looks at.
UNITS = [
    "-",
    "--a",
    '"',
    "'",
    " ",
    "\t",
    "=",
    "a=",
    "a",
    "1.",
    "0.5.",
    "|",
    "(",
    "[",
    "{",
    "<",
    ":",
    'File "',
    "--api-key ",
    "--api-key",
    "x--token ",
    "HF_TOKEN=",
    "api_key=",
    "Authorization: Bearer ",
    "sglang-",
    "sglang==",
    "qwen3",
    "<@U1|",
    "<http:",
    "<!",
    "ServerArgs(",
    "SGLANG_X=",
    "GPU 0: ",
    "\x1b[",
    "[2026-01-01 00:00:00",
    "svc-1  | ",
    "- ",
    "a: b\n",
    "a\n",
    "\\\n",
    "usage: x\n  y\n",
    "error: ",
    "ValueError: x\n",
    "Traceback (most recent call last):\n",
    '  File "/x/sglang/srt/a.py", line 1, in f\n',
    "python -m sglang.launch_server --model-path ",
]
#: Packages whose every module reads user text, and single modules that do.
PACKAGES = [
    "service.engine.logparse",
    "service.engine.locate",
    "service.engine.locate.argparse",
    "service.engine.locate.message",
    "service.engine.release",
    "service.watch",
]
MODULES = [
    "service.engine.flags.parse",
    "service.engine.flags.scan",
    "service.slack.text",
    "service.engine.facts.core",
    "service.api.middleware",
    "service.cli.commands_from",
    "service.cli.shell_words",
]
#: Characters of the runs each pattern meets (a quadratic pattern needs minutes here).
PATTERN_RUN = 100_000


def adversarial(unit: str, size: int, lines: bool = False) -> str:
    """``unit`` repeated to ``size`` characters; with ``lines``, a line break every ~80."""
    if lines:
        unit = unit * (80 // len(unit) + 1) + "\n"
    return (unit * (size // len(unit) + 1))[:size]


def _modules() -> list[str]:
    names = list(MODULES)
    for package in PACKAGES:
        mod = importlib.import_module(package)
        names += [m.name for m in pkgutil.iter_modules(mod.__path__, package + ".")]
    return names


def compiled_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Every ``re.Pattern`` (of text) among the globals of the modules, also inside the
    lists, tuples and dicts they keep them in."""
    found: dict[int, tuple[str, re.Pattern[str]]] = {}

    def walk(name: str, value: object, depth: int) -> None:
        if isinstance(value, re.Pattern):
            if isinstance(value.pattern, str):
                found.setdefault(id(value), (name, value))
        elif depth < 3 and isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(f"{name}[{i}]", item, depth + 1)
        elif depth < 3 and isinstance(value, dict):
            for key, item in value.items():
                walk(f"{name}[{key!r}]", item, depth + 1)

    for module in _modules():
        for key, value in vars(importlib.import_module(module)).items():
            walk(f"{module}.{key}", value, 0)
    return list(found.values())


def _literal_units(pattern: re.Pattern[str]) -> set[str]:
    """The literal runs of ``pattern`` (``File "``, ``<@``, ``--``), to pump it with its own text."""
    import re._constants as c  # type: ignore[import-not-found]
    import re._parser as p  # type: ignore[import-not-found]

    out: set[str] = set()

    def rec(items: object) -> None:
        run = ""
        for op, av in items:  # type: ignore[attr-defined]
            if op is c.LITERAL:
                run += chr(av)
                continue
            if run:
                out.add(run)
                run = ""
            if op is c.SUBPATTERN:
                rec(av[-1])
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                rec(av[2])
            elif op is c.BRANCH:
                for branch in av[1]:
                    rec(branch)
            elif op is c.ATOMIC_GROUP:
                rec(av)
            elif op in (c.ASSERT, c.ASSERT_NOT):
                rec(av[1])
        if run:
            out.add(run)

    rec(p.parse(pattern.pattern, pattern.flags))
    return {u[:24] for u in out if u.strip()}


def probe_patterns(size: int = PATTERN_RUN) -> None:
    """Run every pattern over runs of every unit (and of its own literals): every match
    of ``finditer`` (a search from every position), ``match`` and ``fullmatch``."""
    count = 0
    for _name, pattern in compiled_patterns():
        units = set(UNITS) | _literal_units(pattern)
        units |= {u + " " for u in _literal_units(pattern)}
        for unit in sorted(units):
            text = adversarial(unit, size)
            for _ in itertools.islice(pattern.finditer(text), 200_000):
                pass
            pattern.match(text)
            pattern.fullmatch(text)
            count += 1
    print(f"done {count}", flush=True)


def probe_paths(lines: bool, size: int = MB) -> None:
    """Every parse path on a ``size``-character body of every unit (:func:`parse_input`
    redacts first, so it covers :func:`~service.engine.redact` too)."""
    from service.engine.errors import LogParseError
    from service.engine.facts.core import model_arch_for
    from service.engine.locate.message import normalise, split_exception_prefix
    from service.engine.logparse.parse import parse_input
    from service.slack.text import (
        classify_followup,
        looks_like_log,
        normalize_text,
        split_options,
    )

    count = 0
    for unit in UNITS:
        text = adversarial(unit, size, lines)
        with contextlib.suppress(LogParseError):  # a 4xx answer: read, then refused
            parse_input(text, max_bytes=size)
        normalize_text(text)
        split_options(text)
        looks_like_log(text)
        classify_followup(text[:40_000])  # Slack messages hold at most 40,000 characters
        model_arch_for(text)
        split_exception_prefix(text)
        normalise(text)
        count += 1
    print(f"done {count}", flush=True)


def _bounded(call: str, cpu_s: int) -> subprocess.CompletedProcess[str]:
    """Run ``tests.service.hardening.test_redos.<call>`` in a subprocess limited to ``cpu_s``
    CPU seconds (``RLIMIT_CPU``: SIGXCPU past it)."""
    code = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_CPU, ({cpu_s}, {cpu_s}))\n"
        "from tests.service.hardening import test_redos as t\n"
        f"t.{call}\n"
    )
    # the wall-clock timeout only keeps a stuck probe from hanging the suite; the bound
    # asserted is the CPU limit
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


def _assert_finished(proc: subprocess.CompletedProcess[str], expected: int) -> None:
    killed = proc.returncode < 0 and -proc.returncode in (9, 24)  # SIGKILL, SIGXCPU
    assert proc.returncode == 0, "killed past its CPU limit" if killed else proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(f"done {expected}"), proc.stdout[-2000:]


def test_the_pattern_walk_finds_the_patterns_of_every_reader() -> None:
    names = {name for name, _ in compiled_patterns()}
    for expected in (
        "service.engine.logparse.redact._FLAG_RUN_RE",
        "service.engine.logparse.frames._FRAME_RE",
        "service.engine.logparse.environment._RELEASE_PATTERNS[0][1]",
        "service.engine.locate.message.match._EXC_PREFIX",
        "service.slack.text._LINK",
        "service.engine.facts.core._ARCH_RES[0][0]",
    ):
        assert expected in names
    assert len(names) > 80


def test_every_compiled_pattern_is_linear_on_adversarial_runs() -> None:
    expected = sum(
        len(set(UNITS) | _literal_units(p) | {u + " " for u in _literal_units(p)})
        for _, p in compiled_patterns()
    )
    _assert_finished(_bounded("probe_patterns()", cpu_s=60), expected)


@pytest.mark.parametrize("lines", [False, True], ids=["one-line", "lines"])
def test_every_parse_path_reads_1mb_adversarial_bodies_in_bounded_cpu(lines: bool) -> None:
    _assert_finished(_bounded(f"probe_paths(lines={lines})", cpu_s=90), len(UNITS))


# ------------------------------------------------------------------ a real server


SERVER_UNITS = [
    "-",
    "--a",
    '"',
    " ",
    'File "',
    "=",
    "a=",
    "--api-key ",
    "x--token ",
    "<http:",
    "ValueError: x\n",
    '  File "/x/sglang/srt/a.py", line 1, in f\n',
    "a\n",
]


def _serve(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {
        **os.environ,
        "TRIAGE_KB_DIR": str(tmp_path / "kb"),
        "TRIAGE_API_KEYS": "[]",
        "HF_HUB_OFFLINE": "1",
        "TRIAGE_ON_DEMAND_INGEST": "false",
        "TRIAGE_REPLAY_ENABLED": "false",
        "TRIAGE_FIX_SEARCH_DEADLINE_S": "0",
        "TRIAGE_TRIAGE_RATE_PER_MINUTE": "100000",
        "TRIAGE_TRIAGE_BURST": "100000",
        "TRIAGE_MAX_BODY_BYTES": str(2 * MB),
    }
    env.pop("TRIAGE_CHROMA_URL", None)
    err = (tmp_path / "serve.err").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                httpx.get(f"{url}/healthz", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None, Path(err.name).read_text()[-3000:]
                time.sleep(0.2)
        yield url, proc
    finally:
        proc.kill()  # SIGTERM did not stop the old server inside a quadratic re.sub
        proc.wait(timeout=60)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    yield from _serve(tmp_path)


def test_healthz_answers_while_the_server_reads_1mb_adversarial_bodies(serve) -> None:
    """Each 1 MB body is posted on a thread; meanwhile ``/healthz`` is asked again and
    again, each with a few seconds to answer (a liveness bound, not a timing): every one
    answers, some while a triage is still being read, and every triage gets a 4xx."""
    url, _proc = serve
    statuses: dict[str, int] = {}
    during = 0
    with httpx.Client(base_url=url, timeout=5) as health:
        for unit in SERVER_UNITS:
            body = adversarial(unit, MB).encode()

            def post(unit: str = unit, body: bytes = body) -> None:
                with httpx.Client(base_url=url, timeout=600) as c:
                    statuses[unit] = c.post(
                        "/triage", content=body, headers={"content-type": "text/plain"}
                    ).status_code

            worker = threading.Thread(target=post, daemon=True)
            worker.start()
            while worker.is_alive():
                r = health.get("/healthz")  # raises on a stalled event loop (5 s)
                assert r.status_code == 200
                during += worker.is_alive()  # answered while the triage was still running
            worker.join()
    assert set(statuses) == set(SERVER_UNITS)
    assert all(400 <= s < 500 for s in statuses.values()), statuses
    assert during >= len(SERVER_UNITS)
