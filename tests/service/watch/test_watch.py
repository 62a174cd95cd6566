"""``sglang-triage watch`` on recorded streams, triaged with the session KB.

In-process :class:`Watcher` runs for each prefix style, crash loops, changed commands and a
crash after the ready line; the Slack thread through the local Slack stub; the team service
through a recording app on loopback; the journald client through a fake ``journalctl`` on
PATH; and one end-to-end run of the real CLI process: the seed's journald stream.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from service.engine import Engine
from service.settings import Settings
from service.watch.stream import LineSplitter, file_lines
from service.watch.watcher import Output, Watcher, WatchEvent, slack_reply_due, watch_command
from tests.service.api.conftest import ServerThread, free_port
from tests.service.slack.stub import SlackStub

STREAMS = Path(__file__).parent / "streams"
SMI = STREAMS / "rtx_pro_6000_x8.csv"
LOOPS = [
    "loop_journald_iso.log",
    "loop_compose.log",
    "loop_kubectl.log",
    "loop_slurm_ranks.log",
    "loop_ray.log",
    "loop_rich_launcher.log",
]
BOT_TOKEN = "xoxb-2222222222-3333333333-watchBotTokenValue"


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def watch(
    engine: Engine, settings: Settings, lines: Any, **kw: Any
) -> tuple[Watcher, list[WatchEvent]]:
    watcher = Watcher(engine, settings, **kw)
    events: list[WatchEvent] = []
    watcher.run(lines, events.append)
    return watcher, events


def stream(name: str) -> list[str]:
    return (STREAMS / name).read_text().splitlines()


@pytest.mark.parametrize("name", LOOPS)
def test_a_crash_loop_is_one_report_with_a_count(
    engine: Engine, kb_settings: Settings, name: str
) -> None:
    watcher, events = watch(engine, kb_settings, stream(name))
    assert [e.kind for e in events] == ["report", "repeat", "repeat"]
    assert [e.count for e in events] == [1, 2, 3]
    assert [e.attempt for e in events] == [1, 2, 3]
    report = events[0].report
    assert {e.report.key for e in events} == {report.key} and report.count == 3
    assert watcher.triaged == 1  # a loop is triaged once, not once per restart
    assert report.status == "startup_crash" and report.result is not None
    assert report.result.status in ("located", "argparse")
    assert all("still the same cause" in e.to_json()["headline"] for e in events[1:])


def test_interleaved_ranks_are_triaged_from_one_rank(engine: Engine, kb_settings: Settings) -> None:
    _, events = watch(engine, kb_settings, stream("loop_slurm_ranks.log"))
    result = events[0].report.result
    assert result is not None and result.location is not None
    assert result.location.citation == "0.5.11:sglang/srt/server_args.py:3519-3522"
    assert sum("Traceback" in ln for ln in events[0].report.tail) == 1


def test_a_changed_command_is_a_new_report(engine: Engine, kb_settings: Settings) -> None:
    watcher, events = watch(engine, kb_settings, stream("changed_command.log"))
    assert [(e.kind, e.count) for e in events] == [("report", 1), ("repeat", 2), ("report", 1)]
    first, second = events[0].report, events[2].report
    assert first.key != second.key and first.count == 2
    assert first.command is not None and second.command is not None
    assert "--context-length" in second.command and "--context-length" not in first.command
    assert watcher.triaged == 2


def test_the_same_crash_after_another_one_is_still_a_repeat(
    engine: Engine, kb_settings: Settings
) -> None:
    lines = stream("changed_command.log")
    _, events = watch(engine, kb_settings, lines + lines[:7])  # back to the first command
    assert [(e.kind, e.count) for e in events][-1] == ("repeat", 3)
    assert events[-1].report.key == events[0].report.key


def test_a_crash_after_the_ready_line_is_not_a_start_up_crash(
    engine: Engine, kb_settings: Settings
) -> None:
    watcher, events = watch(engine, kb_settings, stream("ready_then_crash.log"))
    assert len(events) == 1 and events[0].kind == "report"
    report = events[0].report
    assert report.status == "not_startup" and report.result is None
    assert "not a start-up crash" in report.headline()
    assert any("torch.OutOfMemoryError" in ln for ln in report.tail)
    assert watcher.triaged == 0
    out = io.StringIO()
    Output(kb_settings, as_json=True, stream=out)(events[0])
    line = json.loads(out.getvalue())
    assert line["event"] == "report" and line["status"] == "not_startup" and line["result"] is None


def test_seed_stream_gives_two_reports_with_the_detected_hardware(
    engine: Engine, kb_settings: Settings
) -> None:
    from service.watch.gpus import hardware_from_smi

    facts = {"hardware": hardware_from_smi(SMI.read_text())}
    _, events = watch(engine, kb_settings, stream("seed_journald.log"), facts=facts)
    assert [e.kind for e in events] == ["report", "report"]
    for event in events:
        result = event.report.result
        assert result is not None and result.hardware is not None
        assert (result.hardware.name, result.hardware.source) == ("rtx-pro-6000-x8", "detected")


def test_json_lines_show_one_report_for_a_loop(engine: Engine, kb_settings: Settings) -> None:
    out = io.StringIO()
    watcher = Watcher(engine, kb_settings)
    watcher.run(stream("loop_compose.log"), Output(kb_settings, as_json=True, stream=out))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["event"] for d in lines] == ["report", "repeat", "repeat"]
    assert lines[0]["count"] == 1 and lines[0]["result"]["status"] == "located"
    assert [d["key"] for d in lines] == [lines[0]["key"]] * 3 and lines[-1]["count"] == 3


def test_text_output_prints_the_report_once_then_one_line_per_repeat(
    engine: Engine, kb_settings: Settings
) -> None:
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=200, soft_wrap=True)
    Watcher(engine, kb_settings).run(
        stream("loop_kubectl.log"), Output(kb_settings, as_json=False, console=console)
    )
    text = buf.getvalue()
    assert text.count("a start-up crash") == 1
    assert text.count("still the same cause") == 2 and "(3 times)" in text


# ------------------------------------------------------------------------- destinations


@pytest.fixture()
def slack_stub() -> Iterator[SlackStub]:
    stub = SlackStub(BOT_TOKEN)
    with ServerThread(stub.app, free_port()) as srv:
        stub.url = srv.url
        yield stub


def test_slack_gets_one_post_and_replies_in_its_thread(
    engine: Engine, kb_settings: Settings, slack_stub: SlackStub
) -> None:
    settings = kb_settings.model_copy(
        update={"slack_bot_token": BOT_TOKEN, "slack_api_url": f"{slack_stub.url}/api/"}
    )
    output = Output(settings, as_json=True, slack_channel="C0WATCH", stream=io.StringIO())
    Watcher(engine, settings).run(stream("loop_journald_iso.log"), output)
    posts = slack_stub.calls_of("chat.postMessage")
    assert len(posts) == 3  # the report, then replies at counts 2 and 3
    parent, replies = posts[0], posts[1:]
    assert "thread_ts" not in parent and parent["channel"] == "C0WATCH"
    assert all(r["thread_ts"] == parent["_ts"] for r in replies)
    assert ["(2 times)" in replies[0]["text"], "(3 times)" in replies[1]["text"]] == [True, True]
    assert BOT_TOKEN not in json.dumps(posts)


def test_slack_replies_thin_out_in_a_long_loop() -> None:
    assert [n for n in range(1, 1001) if slack_reply_due(n)] == [
        2,
        3,
        5,
        10,
        20,
        50,
        100,
        200,
        500,
        1000,
    ]


def test_the_team_service_gets_each_report_once(engine: Engine, kb_settings: Settings) -> None:
    received: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/triage")
    async def triage(request: Request) -> dict[str, str]:
        received.append(await request.json())
        return {"id": f"t{len(received)}"}

    with ServerThread(app, free_port()) as srv:
        out = io.StringIO()
        lines = stream("loop_compose.log") + stream("ready_then_crash.log")
        Watcher(engine, kb_settings).run(
            lines, Output(kb_settings, as_json=True, report_to=srv.url, stream=out)
        )
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["report", "repeat", "repeat", "report"]
    assert len(received) == 1  # the loop once; a crash after the ready line is not sent
    assert (
        "AssertionError" in received[0]["log"]
        and "--speculative-eagle-topk" in received[0]["command"]
    )
    assert events[0]["sent"]["report_url"] == f"{srv.url}/t/t1"
    assert any("not a start-up crash" in n for n in events[-1]["notes"])


# --------------------------------------------------------------------------- hardening


def _loop(n: int) -> Iterator[str]:
    """``n`` restarts of one argparse crash, with model-loading chatter in between."""
    crash = stream("changed_command.log")[:7]
    for i in range(n):
        yield from crash
        for j in range(95):
            yield f"[2026-05-02 10:00:00] chatter {i} {j} " + "x" * (j * 3)


def test_a_long_loop_is_triaged_once_and_kept_bounded(
    engine: Engine, kb_settings: Settings
) -> None:
    watcher, events = watch(engine, kb_settings, _loop(2000))  # 204,000 lines
    assert len(events) == 2000 and events[-1].count == 2000
    assert [e.kind for e in events].count("report") == 1
    assert watcher.triaged == 1 and len(watcher.reports) == 1 and len(watcher.aliases) == 1


def test_remembered_reports_are_bounded(engine: Engine, kb_settings: Settings) -> None:
    crash = stream("changed_command.log")[:7]
    lines = [ln.replace("--tp 1", f"--tp 1 --port {30000 + i}") for i in range(40) for ln in crash]
    watcher, events = watch(engine, kb_settings, lines, max_remembered=8)
    assert [e.kind for e in events] == ["report"] * 40  # 40 commands: 40 reports
    assert len(watcher.reports) == 8 and len(watcher.aliases) == 8


def test_binary_garbage_does_not_crash_the_watch(
    engine: Engine, kb_settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(29)
    garbage = rng.randbytes(300_000) + b"\x00" * 5000 + b"\xff\xfe" * 5000
    crash = "\n".join(stream("loop_kubectl.log")[:6]).encode()
    log = tmp_path / "garbage.log"
    # garbage alone, garbage inside a traceback, then a clean crash
    log.write_bytes(
        garbage
        + b"\nTraceback (most recent call last):\n"
        + garbage[:20_000]
        + b"\nAssertionError\n"
        + crash
        + b"\n"
    )
    watcher, events = watch(
        engine, kb_settings, file_lines(log, follow=False, splitter=LineSplitter(max_line=2048))
    )
    assert [e.kind for e in events] == ["report", "report"]
    assert (
        events[0].report.result is None and events[0].report.error
    )  # unreadable: said, not raised
    assert events[-1].report.result is not None and events[-1].report.result.status == "argparse"
    assert all(len(ln) <= 2048 for e in events for ln in e.report.tail)


def test_following_a_file_settles_a_crash_when_the_stream_goes_quiet(
    engine: Engine, kb_settings: Settings, tmp_path: Path
) -> None:
    log = tmp_path / "sglang.log"
    log.write_text("")
    events: list[WatchEvent] = []
    stop = threading.Event()
    watcher = Watcher(engine, kb_settings)
    lines = file_lines(log, follow=True, poll_s=0.01, idle_s=0.05, stop=stop.is_set)
    runner = threading.Thread(target=watcher.run, args=(lines, events.append), daemon=True)
    runner.start()
    try:
        with log.open("a") as f:  # no exit line and no restart: only the quiet settles it
            f.write("\n".join(stream("loop_kubectl.log")[:6]) + "\n")
        end = time.monotonic() + 60
        while not events and time.monotonic() < end:
            time.sleep(0.02)
        assert [e.kind for e in events] == ["report"]
    finally:
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive() and len(events) == 1


# -------------------------------------------------------------------------- the command


def test_watch_command_follows_journald_through_the_client(
    kb_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "journalctl"  # prints the recorded stream, as `journalctl -o short-iso` would
    fake.write_text(
        f'#!/bin/sh\necho "$@" > "{tmp_path}/argv"\ncat "{STREAMS}/loop_journald_iso.log"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code = watch_command(journald="sglang", as_json=True, settings=kb_settings, idle_s=5.0)
    assert code == 0
    assert (tmp_path / "argv").read_text().split() == ["-o", "short-iso", "-fu", "sglang"]
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["count"]) for e in events] == [
        ("report", 1),
        ("repeat", 2),
        ("repeat", 3),
    ]


def test_watch_command_refuses_bad_sources(
    kb_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = STREAMS / "loop_kubectl.log"
    assert watch_command(file=log, docker="x", settings=kb_settings) == 2
    assert "give one source" in capsys.readouterr().err
    assert watch_command(file=tmp_path / "missing.log", follow=False, settings=kb_settings) == 2
    assert "cannot read" in capsys.readouterr().err
    assert watch_command(file=log, gpus_from=log, settings=kb_settings) == 2
    assert "lists no GPU" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))
    for kind in ("journald", "docker", "kubectl"):
        assert watch_command(**{kind: "sglang"}, settings=kb_settings) == 2
        assert "not installed or not on PATH" in capsys.readouterr().err


def test_cli_process_on_the_seed_journald_stream(kb_settings: Settings, kb) -> None:
    env = {
        **os.environ,
        "TRIAGE_KB_DIR": str(kb_settings.kb_path),
        "TRIAGE_HOME": str(kb_settings.home),
        "TRIAGE_ON_DEMAND_INGEST": "false",
        "TRIAGE_FIX_SEARCH_DEADLINE_S": "0",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("TRIAGE_CHROMA_URL", None)
    exe = Path(sys.executable).with_name("sglang-triage")
    with (STREAMS / "seed_journald.log").open("rb") as stdin:  # `journalctl -u sglang | watch`
        proc = subprocess.run(
            [str(exe), "watch", "--no-follow", "--json", "--gpus-from", str(SMI)],
            stdin=stdin,
            capture_output=True,
            env=env,
            timeout=300,
        )
    assert proc.returncode == 0, proc.stderr.decode()
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [(e["event"], e["attempt"]) for e in events] == [("report", 1), ("report", 2)]
    first, second = events[0]["result"], events[1]["result"]
    assert first["status"] == "located" and first["check"]["bare"] is True
    assert first["location"]["citation"] == "0.5.11:sglang/srt/server_args.py:3519-3522"
    fix = next(f for f in first["fixes"] if f["recommended"])
    assert "--speculative-eagle-topk 4" in fix["command"]
    assert not any(e.startswith("- --speculative-eagle-topk") for e in fix["edits"])
    for event in events:
        hw = event["result"]["hardware"]
        assert (hw["name"], hw["source"]) == ("rtx-pro-6000-x8", "detected")
        assert event["facts"]["hardware"]["profile"] == "rtx-pro-6000-x8"
        assert "RTX PRO 6000 Blackwell" in hw["evidence"]
    assert "--speculative-eagle-topk" not in " ".join(events[1]["command"])
    assert second["location"]["citation"] == first["location"]["citation"]
    assert "2 report(s)" in proc.stderr.decode()
