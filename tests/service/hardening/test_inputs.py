"""Pathological inputs over real HTTP: a 4xx or a bounded answer, never a 5xx or a hang.

"Bounded" is in CPU seconds, never wall-clock time (as in :mod:`.test_redos`): such an
input is posted over loopback to a server of its own in a subprocess with ``RLIMIT_CPU``
(the kernel ends it with SIGXCPU past the limit; a busy machine does not use it up), and
the test asserts the subprocess got its answer. The limits count the server's start and
its first, cold triage too (about 6 CPU seconds), and are about four times what it takes.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.settings import Settings

from ..api.conftest import make_server
from .test_redos import ROOT, _assert_finished

#: The subprocess: a server on the pickled settings (``argv[1]``) answers one POST of the
#: body (``argv[2]``); it prints the status and answer, then "done 1".
_CHILD = """
import json, pickle, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_CPU, ({cpu_s}, {cpu_s}))
import httpx
from tests.service.api.conftest import make_server
settings = pickle.loads(Path(sys.argv[1]).read_bytes())
with make_server(settings) as srv, httpx.Client(base_url=srv.url, timeout=None) as c:
    r = c.post("/triage", content=Path(sys.argv[2]).read_bytes(),
               headers={{"content-type": "text/plain"}})
print(json.dumps({{"status": r.status_code, "answer": r.json()}}))
print("done 1", flush=True)
"""


@pytest.fixture(scope="module")
def big_settings(api_settings: Settings) -> Settings:
    """A 16 MiB body limit, so large inputs reach the parser."""
    return api_settings.model_copy(update={"max_body_bytes": 16 * 1024 * 1024})


@pytest.fixture(scope="module")
def big_server(big_settings: Settings):
    with make_server(big_settings) as srv:
        yield srv


def _post(url: str, content: bytes, ctype: str = "text/plain") -> httpx.Response:
    with httpx.Client(base_url=url, timeout=120) as c:
        return c.post("/triage", content=content, headers={"content-type": ctype})


def _post_within_cpu(settings: Settings, body: bytes, tmp_path: Path, cpu_s: int) -> dict[str, Any]:
    """POST ``body`` to ``/triage`` of a server on ``settings``, all of it (start, triage,
    answer) in a subprocess limited to ``cpu_s`` CPU seconds; its status and answer."""
    (tmp_path / "settings.pickle").write_bytes(pickle.dumps(settings))
    (tmp_path / "body").write_bytes(body)
    # the wall-clock timeout only keeps a stuck subprocess from hanging the suite
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD.format(cpu_s=cpu_s),
            str(tmp_path / "settings.pickle"),
            str(tmp_path / "body"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    _assert_finished(proc, 1)
    return json.loads(proc.stdout.strip().splitlines()[-2])


def test_ten_megabyte_log_is_refused_by_default(client: httpx.Client) -> None:
    r = client.post(
        "/triage", content=b"x" * (10 * 1024 * 1024), headers={"content-type": "text/plain"}
    )
    assert r.status_code == 413 and "limit" in r.json()["detail"]


def test_ten_megabyte_log_gets_a_bounded_answer_when_allowed(
    big_settings: Settings, tmp_path: Path
) -> None:
    noise = b"[2026-01-01 00:00:00] INFO scheduler.py:1: step\n" * 200_000
    tail = (
        b"Traceback (most recent call last):\n"
        b'  File "/x/sglang/srt/server_args.py", line 3519, in _handle_speculative_decoding\n'
        b"    assert (\nAssertionError\n"
    )
    # about 15 CPU seconds, 7 of them reading the 10 MB (a quadratic read would take hours)
    got = _post_within_cpu(big_settings, noise + tail, tmp_path, cpu_s=60)
    # the whole log was read, within the parser's own CPU budget: the crash at its end found
    assert got["status"] == 200, got
    assert got["answer"]["location"]["function"] == "ServerArgs._handle_speculative_decoding"


def test_hundred_thousand_line_traceback(big_server) -> None:
    frames = b'  File "/x/sglang/srt/a.py", line 12, in f\n    g()\n' * 50_000
    r = _post(
        big_server.url, b"Traceback (most recent call last):\n" + frames + b"RecursionError: deep\n"
    )
    assert r.status_code < 500


def test_deeply_nested_json(client: httpx.Client) -> None:
    body = b'{"log": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = client.post("/triage", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_regex_backtracking_bait(api_settings: Settings, tmp_path: Path) -> None:
    bait = (
        "Traceback (most recent call last):\n"
        + '  File "'
        + "a" * 50_000
        + '", line '
        + "9" * 5000
        + ", in "
        + "(" * 20_000
        + "\n"
        + "ValueError: "
        + "a" * 30_000
        + "!" * 10
        + "\n"
    )
    # about 6 CPU seconds, nearly all of them the server's start and cold first triage
    got = _post_within_cpu(api_settings, bait.encode(), tmp_path, cpu_s=30)
    assert got["status"] < 500, got


@pytest.mark.parametrize("payload", [b"\xff\xfe\xfd not utf-8 \xc3\x28", b"AssertionError\x00\x00"])
def test_non_utf8_and_nul_bytes(client: httpx.Client, payload: bytes) -> None:
    r = client.post("/triage", content=payload, headers={"content-type": "text/plain"})
    assert r.status_code == 415


def test_json_without_log(client: httpx.Client) -> None:
    r = client.post("/triage", json={"command": "--tp 8"})
    assert r.status_code == 422
