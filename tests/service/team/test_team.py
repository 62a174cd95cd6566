"""The team setup end to end: a real PostgreSQL, two ``sglang-triage serve`` processes
sharing it and a small KB, the Slack bot on both (against the local Slack stub), and
``sglang-triage replay-worker`` processes.

* a permalink created on one process is served by the other;
* a Slack retry (same event id, ``X-Slack-Retry-Num``) delivered to the other process
  is not answered twice, and a follow-up there is answered from the thread's context;
* a worker killed (SIGKILL) in the middle of a job loses it to the next worker once its
  lease runs out, and the verdicts reach every triage waiting on the job.

The replay runs the real worker loop, harness and sandbox with the harness's test hook
(``TRIAGE_REPLAY_TEST_PAYLOAD``: a script the sandboxed child runs first): one worker's
script sleeps, the next one's writes a verdict for each command line at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kb.records import Records
from service.replay.jobs import JobQueue
from service.replay.sandbox import status as sandbox_status
from service.settings import Settings
from tests.service.api.conftest import free_port
from tests.service.slack.conftest import sign
from tests.service.slack.stub import BOT_USER, SlackStub, running_stub
from tests.trees import release_tree

from .pg import PostgresServer

BOT_TOKEN = "xoxb-1111111111-2222222222-teamBotTokenValue"
SIGNING_SECRET = "3f742231b10e8888abcd99yyyzzz85a5"
ARGV = [
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp",
    "8",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/d",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]
FILES = [
    "sglang/srt/server_args.py",
    "sglang/launch_server.py",
    "sglang/srt/configs/device_config.py",
    "sglang/srt/server_args_config_parser.py",
]
SLEEPY = "import time\ntime.sleep(300)\n"
# answers every job on the runner's result pipe (one JSON line per job), as child.py does
INSTANT = """import json, os, sys
cfg = json.loads(open(sys.argv[1]).read())
for i, job in enumerate(cfg["jobs"]):
    line = {"index": i, "result": {"status": "passed", "ran": "test payload"}}
    os.write(int(cfg["result_fd"]), (json.dumps(line) + "\\n").encode())
os._exit(0)
"""


@pytest.fixture(scope="module")
def team_kb(
    tmp_path_factory: pytest.TempPathFactory, sglang_source: Callable, cache_settings: Settings
) -> tuple[Path, str]:
    """A KB of a few real files of 0.5.11 (structure only), and a seed crash log of it."""
    from evals.render import render_log
    from ingest.pipeline import index_structure
    from kb.knowledge import KnowledgeBase
    from kb.sources import read_local

    root = tmp_path_factory.mktemp("team")
    src = sglang_source("0.5.11").root
    release_tree(root / "tree", "0.5.11", {rel: src / rel for rel in FILES})
    settings = cache_settings.model_copy(update={"kb_dir": root / "kb", "chroma_url": None})
    kb = KnowledgeBase(settings)
    index_structure(kb, read_local(root / "tree"))
    check = next(
        c
        for c in kb.store.checks("0.5.11", function="ServerArgs._handle_speculative_decoding")
        if c.bare and "speculative_eagle_topk is None" in c.condition
    )
    log = render_log(kb.store, "0.5.11", check, python="3.12", argv=ARGV)
    kb.close()
    return root / "kb", log


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def team_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The shared database: a PostgreSQL database, or (the embedded default, one host) a
    SQLite file both processes open."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('team-sqlite') / 'records.sqlite'}"
    postgres: PostgresServer = request.getfixturevalue("postgres")
    return postgres.new_database()


@pytest.fixture(scope="module")
def slack_stub() -> Iterator[SlackStub]:
    with running_stub(BOT_TOKEN) as stub:
        yield stub


def _env(kb_dir: Path, db: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "TRIAGE_KB_DIR": str(kb_dir),
        "TRIAGE_DATABASE_URL": db,
        "TRIAGE_API_KEYS": "[]",
        "TRIAGE_ON_DEMAND_INGEST": "false",
        "TRIAGE_REPLAY_LEASE_S": "3",
        "HF_HUB_OFFLINE": "1",
        # the durable background jobs are under test here, not the search before answering
        # (its verdicts would reorder the fixes by timing, and so the jobs' batch keys)
        "TRIAGE_FIX_SEARCH_DEADLINE_S": "0",
        **extra,
    }
    env.pop("TRIAGE_CHROMA_URL", None)
    return env


class Proc:
    """A ``sglang-triage`` subprocess, its output in a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli.main", *args],
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


def _serve(kb_dir: Path, db: str, stub: SlackStub, log: Path, chroma: str) -> tuple[Proc, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = _env(
        kb_dir,
        db,
        TRIAGE_SLACK_BOT_TOKEN=BOT_TOKEN,
        TRIAGE_SLACK_SIGNING_SECRET=SIGNING_SECRET,
        TRIAGE_SLACK_API_URL=f"{stub.url}/api/",
        TRIAGE_PUBLIC_URL=url,
    )
    env["TRIAGE_CHROMA_URL"] = chroma
    return Proc(["serve", "--port", str(port)], env, log), url


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``chroma run`` server on a free port, which both API processes use."""
    port = free_port()
    folder = tmp_path_factory.mktemp("chroma")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "chroma"),
            "run",
            "--path",
            str(folder),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("chroma run did not come up")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _wait_up(proc: Proc, url: str, budget_s: float = 600) -> None:
    deadline = time.monotonic() + budget_s
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.proc.poll() is None and time.monotonic() < deadline, proc.text()[-3000:]
        time.sleep(0.3)


@pytest.fixture(scope="module")
def servers(
    team_kb: tuple[Path, str],
    team_db: str,
    slack_stub: SlackStub,
    chroma: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[str]]:
    logs = tmp_path_factory.mktemp("serve-logs")
    started = [
        _serve(team_kb[0], team_db, slack_stub, logs / f"serve{i}.log", chroma) for i in (1, 2)
    ]
    try:
        for proc, url in started:
            _wait_up(proc, url)
        yield [url for _, url in started]
    finally:
        for proc, _ in started:
            proc.stop()


def _event(url: str, event: dict[str, Any], event_id: str, **headers: str) -> httpx.Response:
    body = json.dumps(
        {
            "token": "legacy",
            "team_id": "T0STUB",
            "api_app_id": "A0STUB",
            "type": "event_callback",
            "event": event,
            "event_id": event_id,
            "event_time": int(time.time()),
        }
    ).encode()
    ts = int(time.time())
    return httpx.post(
        f"{url}/slack/events",
        content=body,
        timeout=30,
        headers={
            "content-type": "application/json",
            "x-slack-request-timestamp": str(ts),
            "x-slack-signature": sign(body, ts, SIGNING_SECRET),
            **headers,
        },
    )


def _mention(channel: str, text: str, ts: str, thread_ts: str | None = None) -> dict[str, Any]:
    ev = {
        "type": "app_mention",
        "user": "U0USER",
        "text": f"<@{BOT_USER}> {text}",
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
    }
    return ev | ({"thread_ts": thread_ts} if thread_ts else {})


def test_both_processes_use_the_chroma_server(servers: list[str]) -> None:
    for url in servers:
        ready = httpx.get(f"{url}/readyz", timeout=30).json()
        assert ready["chroma"] == "ok" and ready["releases"] == ["0.5.11"]


def test_a_permalink_made_on_one_process_is_served_by_the_other(
    servers: list[str], team_kb: tuple[Path, str]
) -> None:
    one, two = servers
    made = httpx.post(f"{one}/triage?release=0.5.11&replay=false", content=team_kb[1], timeout=120)
    assert made.status_code == 200, made.text
    tid = made.json()["id"]
    got = httpx.get(f"{two}/triage/{tid}", timeout=30)
    assert got.status_code == 200 and got.json()["result"]["summary"] == made.json()["summary"]
    page = httpx.get(f"{two}/t/{tid}", timeout=30)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    confirmed = httpx.post(
        f"{two}/incidents/{tid}/confirm", timeout=30, json={"fix": {"rank": 1}, "note": "worked"}
    )
    assert confirmed.status_code == 200, confirmed.text
    # the confirmation made on the second process is "similar" on the first one's next triage
    again = httpx.post(
        f"{one}/triage?release=0.5.11&replay=false", content=team_kb[1], timeout=120
    ).json()
    assert [s["note"] for s in again["similar"]] == ["worked"]


def test_a_slack_retry_delivered_to_the_other_process_is_answered_once(
    servers: list[str], team_kb: tuple[Path, str], slack_stub: SlackStub
) -> None:
    one, two = servers
    ts, eid = f"1700000001.{time.time_ns() % 1_000_000:06d}", f"EvTeam{time.time_ns()}"
    event = _mention("C0TEAM", f"```{team_kb[1]}```", ts)
    assert _event(one, event, eid).status_code == 200
    retry = _event(
        two, event, eid, **{"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}
    )
    assert retry.status_code == 200

    def in_thread(p: dict) -> bool:
        return p.get("channel") == "C0TEAM" and p.get("thread_ts") == ts

    first = slack_stub.wait_for("chat.postMessage", in_thread, timeout=120)[0]
    assert "_handle_speculative_decoding" in json.dumps(first)
    time.sleep(2.0)
    assert len(slack_stub.calls_of("chat.postMessage", in_thread)) == 1
    # a follow-up in the thread, delivered to the other process, is answered from the
    # thread's context that the first process stored
    follow = _mention("C0TEAM", "why?", f"{ts}1", thread_ts=ts)
    assert _event(two, follow, f"{eid}-why").status_code == 200
    second = slack_stub.wait_for("chat.postMessage", in_thread, timeout=60, count=2)[1]
    assert "*Why:*" in json.dumps(second)


@pytest.mark.skipif(not sandbox_status().available, reason="replay needs bubblewrap")
def test_a_killed_workers_job_is_run_by_the_next_worker(
    servers: list[str], team_kb: tuple[Path, str], team_db: str, tmp_path: Path
) -> None:
    one, two = servers
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    (tmp_path / "instant.py").write_text(INSTANT)
    queue = JobQueue(Records(team_db).engine)
    # the module's earlier triages may have queued replays: settle them here, so the doomed
    # worker's first claim is this test's job (else it sleeps through theirs first)
    while (left := queue.claim("test-drain")) is not None:
        queue.settle(left, queue.waiting(left))
        assert queue.finish(left, error="drained by the test")
    before = {j["id"] for j in queue.jobs()}
    doomed = Proc(
        ["replay-worker", "--poll", "0.2"],
        _env(team_kb[0], team_db, TRIAGE_REPLAY_TEST_PAYLOAD=str(tmp_path / "sleepy.py")),
        tmp_path / "worker1.log",
    )
    nxt: Proc | None = None
    try:
        body = {"log": team_kb[1], "release": "0.5.11", "hardware": "h100-x8"}
        a = httpx.post(f"{one}/triage", json=body, timeout=120).json()
        b = httpx.post(f"{two}/triage", json=body, timeout=120).json()  # the same replay
        assert a["replay"]["status"] == b["replay"]["status"] == "pending"
        new = [j for j in queue.jobs() if j["id"] not in before]
        assert len(new) == 1  # one job for both triages: the same cache key
        job_id = new[0]["id"]

        def job() -> dict[str, Any]:
            return next(j for j in queue.jobs() if j["id"] == job_id)

        deadline = time.monotonic() + 600  # a hang guard: a worker's start on a busy machine
        while not (
            job()["state"] == "running" and f":{doomed.proc.pid}:" in (job()["worker"] or "")
        ):
            assert doomed.proc.poll() is None and time.monotonic() < deadline, doomed.text()
            time.sleep(0.2)
        time.sleep(1.0)  # inside the sandboxed replay now
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(timeout=10)
        assert job()["state"] == "running"  # still leased to the dead worker
        nxt = Proc(
            ["replay-worker", "--poll", "0.2"],
            _env(team_kb[0], team_db, TRIAGE_REPLAY_TEST_PAYLOAD=str(tmp_path / "instant.py")),
            tmp_path / "worker2.log",
        )
        deadline = time.monotonic() + 600  # a hang guard
        while job()["state"] != "done":
            assert nxt.proc.poll() is None and time.monotonic() < deadline, nxt.text()
            time.sleep(0.3)
        done = job()
        assert done["attempts"] == 2 and f":{nxt.proc.pid}:" in done["worker"]
        for tid, url in ((a["id"], two), (b["id"], one)):  # each read on the other process
            stored = httpx.get(f"{url}/triage/{tid}", timeout=30).json()["result"]
            assert stored["replay"]["status"] == "passed", stored["replay"]
            assert "h100-x8" in stored["replay"]["detail"]
            assert stored["fixes"] and all(
                f["replay"]["status"] == "verified" for f in stored["fixes"]
            )
    finally:
        doomed.stop()
        if nxt is not None:
            nxt.stop()
