"""Secret redaction (``service.engine.logparse.redact``) and the parse's CPU budget (issue 26).

The secret-flag pattern used to backtrack quadratically on runs of ``-`` (16 KB took 17 CPU
seconds); it now reads each ``[\\w-]`` run once and checks the flag name in code. These
tests pin that its answers are those of the old pattern on ordinary text, that redacted
text is not redacted again, and that 1 MB runs are read within a CPU limit.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.engine.logparse.parse import CPU_S_PER_MB, cpu_budget, parse_input
from service.engine.logparse.redact import REDACTED, Redacted, redact, redact_payload
from service.engine.logparse.text import CpuBudget
from service.errors import InputTooLarge, NoCrashFound

ROOT = Path(__file__).resolve().parents[4]

#: The flag pattern before issue 26 (quadratic on long runs; fine on the short texts below).
_OLD_FLAGS = re.compile(
    r"(--(?:[\w-]*-)?(?:api-key|admin-api-key|hf-token|token|secret|password|access-key|secret-key))"
    r"(?=[\s=])(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)",
    re.I,
)


def _old_redact(text: str) -> str:
    """The old redaction: the old flag pattern, then today's other patterns (unchanged)."""
    from service.engine.logparse.redact import _SECRET_PATTERNS

    text = _OLD_FLAGS.sub(rf"\1\2{REDACTED}", text)
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--api-key sk-x1", "--api-key ***"),
        ("--hf-token=abc def", "--hf-token=*** def"),
        ("--admin-api-key 'a b' --tp 2", "--admin-api-key *** --tp 2"),
        ('--api-key "a b" --tp 2', "--api-key *** --tp 2"),
        ("--API-KEY Secret1", "--API-KEY ***"),
        ("---api-key v", "---api-key ***"),
        ("x--token v", "x--token ***"),  # the old pattern started at any "--"
        ("-x--api-key v", "-x--api-key ***"),
        ("--my-admin-api-key v", "--my-admin-api-key ***"),
        ("--foo --api-key v", "--foo --api-key ***"),
        ("--api-key --token v", "--api-key *** v"),  # the value is taken first, as before
        ("--tokens v", "--tokens v"),
        ("my-token v", "my-token v"),
        ("--tokenizer-path v", "--tokenizer-path v"),
        ("--api-key", "--api-key"),
        ("--api-key\n  v", "--api-key\n  ***"),
    ],
)
def test_secret_flags_are_redacted_as_before(text: str, expected: str) -> None:
    assert redact(text) == expected == _old_redact(text)


_PIECES = [
    "--api-key",
    "--hf-token",
    "--admin-api-key",
    "--token",
    "--secret-key",
    "--password",
    "x--token",
    "-",
    "--",
    "=",
    " ",
    "\n",
    "\t",
    "'",
    '"',
    "a",
    "_",
    "1",
    "tokens",
    "my-token",
    "--API-Key",
    "--a-",
    "HF_TOKEN=",
    "api_key=",
    "é",
    ",",
    ")",
    "sk-abcdefghijklmnop",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=16).map("".join))
def test_redaction_matches_the_old_patterns_on_short_text(text: str) -> None:
    assert redact(text) == _old_redact(text)


def test_redacted_text_is_returned_as_it_is_and_extras_still_go() -> None:
    once = redact("HF_TOKEN=hf_abcdefghijklmnop --api-key k1 bot-xyz-secret")
    assert isinstance(once, Redacted) and "hf_abc" not in once and "k1" not in once
    assert redact(once) is once  # a front end redacted it: the engine's redact() is free
    again = redact(once, extra=["bot-xyz-secret"])
    assert isinstance(again, Redacted) and "bot-xyz-secret" not in again
    sliced = once[:5]  # plain text again: redacted afresh
    assert type(sliced) is str and not isinstance(sliced, Redacted)
    payload = redact_payload({"log": "--api-key k2", "command": ["--hf-token", "x"]})
    assert payload["log"] == "--api-key ***" and isinstance(payload["log"], Redacted)


def _bounded(code: str, cpu_s: int) -> subprocess.CompletedProcess[str]:
    """``code`` in a subprocess limited to ``cpu_s`` CPU seconds (SIGXCPU past them)."""
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_CPU, ({cpu_s}, {cpu_s}))\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


def test_redaction_of_1mb_runs_stays_within_a_cpu_limit() -> None:
    # the old pattern: 17 CPU s for 16 KB of "-", so hours for these
    code = (
        "from service.engine.logparse.redact import redact\n"
        "for unit in ['-', '--a', '--api-key ', 'x--token ', 'HF_TOKEN=', 'a=', ' ', '\"']:\n"
        "    redact(unit * (1_000_000 // len(unit)))\n"
        "print('done')\n"
    )
    proc = _bounded(code, cpu_s=20)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]


def test_the_cpu_budget_refuses_a_log_once_it_is_spent() -> None:
    body = "a\n" * 500_000  # 1 MB: redaction alone takes more than no time at all
    with pytest.raises(InputTooLarge) as exc:
        parse_input(body, max_bytes=2_000_000, budget=CpuBudget(0.0))
    assert exc.value.details["stage"] == "after redacting secrets"
    assert "CPU seconds" in exc.value.message
    with pytest.raises(NoCrashFound):  # the default budget reads the whole of it
        parse_input(body, max_bytes=2_000_000)


def test_the_cpu_budget_scales_with_the_size_limit() -> None:
    assert cpu_budget(1024 * 1024).seconds == CPU_S_PER_MB
    assert cpu_budget(1000).seconds == CPU_S_PER_MB  # at least one MiB's worth
    assert cpu_budget(16 * 1024 * 1024).seconds == 16 * CPU_S_PER_MB
    assert CpuBudget(None).exhausted() is False


def test_text_longer_than_the_limit_is_refused_before_it_is_redacted() -> None:
    code = (
        "from service.engine.logparse.parse import parse_input\n"
        "from service.errors import InputTooLarge\n"
        "try:\n"
        "    parse_input('-' * 50_000_000, max_bytes=1000)\n"
        "except InputTooLarge:\n"
        "    print('done')\n"
    )
    proc = _bounded(code, cpu_s=10)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]
