"""The crash report ``run`` and ``watch`` share: its signature, JSON, text, the facts it
stamps on an answer, and sending it — to a real sglang-triage API on loopback (``POST
/triage``) and to Slack's Web API through the local stub."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from rich.console import Console

from service.engine import Engine, TriageResult
from service.settings import Settings
from service.watch.report import REPORT_KEY_ENV, CrashReport, apply_facts, crash_key, send_report
from tests.service.api.conftest import free_port, make_server
from tests.service.slack.stub import SlackStub, running_stub

ROOT = Path(__file__).resolve().parents[3]
SEED = (ROOT / "examples" / "seed_attempt1.log").read_text()
BOT_TOKEN = "xoxb-1111111111-2222222222-runReportTokenValue"
RTX_ROW = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 12.0, 575.57.08"
FACTS = {
    "release": {
        "version": "0.5.11",
        "source": "installed",
        "detail": "importlib.metadata of /v/bin/python",
        "location": "/v/lib/python3.12/site-packages/sglang",
        "commit": None,
        "interpreter": "/v/bin/python",
    },
    "hardware": {
        "profile": "rtx-pro-6000-x8",
        "source": "nvidia-smi --query-gpu=...",
        "evidence": RTX_ROW,
        "detail": "by GPU name; 8 GPUs listed",
        "count": 8,
    },
    "env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
}


@pytest.fixture(scope="module")
def seed_result(kb) -> TriageResult:
    return Engine(kb).triage(SEED, release="0.5.11", hardware="rtx-pro-6000-x8")


def _report(result: TriageResult | None, status: str = "startup_crash") -> CrashReport:
    res = apply_facts(result.model_copy(deep=True), FACTS) if result is not None else None
    return CrashReport(
        result=res,
        tail=SEED.splitlines(),
        status=status,
        facts=FACTS,
        command=["python3", "-m", "sglang.launch_server", "--tp", "8"],
        exit_code=1,
    )


def test_the_key_ignores_timestamps_and_pids() -> None:
    one = ["[2026-05-02 10:14:03] pid=4411 loading", "RuntimeError: CUDA out of memory at 0x7f00aa"]
    two = ["[2026-05-03 11:00:59] pid=9 loading", "RuntimeError: CUDA out of memory at 0x7f1234"]
    assert crash_key(None, one) == crash_key(None, two)
    assert crash_key(None, one) != crash_key(None, [*one[:1], "ValueError: other"])
    assert crash_key(None, one, "startup_crash") != crash_key(None, one, "not_startup")
    with pytest.raises(ValueError):
        CrashReport(result=None, tail=[], status="crashed")


def test_facts_are_stamped_on_the_answer(seed_result: TriageResult) -> None:
    report = _report(seed_result)
    res = report.result
    assert res is not None and res.location is not None and res.check is not None and res.check.bare
    assert res.release.release == "0.5.11" and res.release.match == "exact"
    assert res.release.method == "installed" and res.release.source == "installed"
    assert res.release.installed.location == FACTS["release"]["location"]
    assert res.hardware is not None and res.hardware.source == "detected"
    assert res.hardware.evidence == RTX_ROW
    # the JSON is the answer's own schema, "detected" included
    data = report.to_json()
    back = TriageResult.model_validate(data["result"])
    assert back.hardware is not None and back.hardware.source == "detected"
    assert (
        data["key"] == report.key == crash_key(res, report.tail)
        and data["tail"] == SEED.splitlines()
    )
    # the signature is the answer's: the same crash with another tail has the same key
    assert _report(seed_result).key == report.key


def test_the_nearest_release_is_not_called_exact(seed_result: TriageResult) -> None:
    facts = {**FACTS, "release": {**FACTS["release"], "version": "0.5.12"}}
    res = apply_facts(seed_result.model_copy(deep=True), facts)
    assert res.release.match == "nearest" and res.release.method != "installed"
    text = io.StringIO()
    CrashReport(result=res, tail=[], status="startup_crash", facts=facts).render_text(
        Console(file=text, width=200)
    )
    assert "release: 0.5.12 not in the KB, answered from 0.5.11 (installed" in text.getvalue()


def test_the_text_says_where_each_fact_came_from(seed_result: TriageResult) -> None:
    text = io.StringIO()
    _report(seed_result).render_text(Console(file=text, width=300))
    out = text.getvalue()
    assert "a start-up crash" in out.splitlines()[0]
    assert "release: 0.5.11 exact (installed; importlib.metadata of /v/bin/python)" in out
    assert f'hardware: rtx-pro-6000-x8 detected (nvidia-smi --query-gpu=...: "{RTX_ROW}"' in out
    assert "env: SGLANG_ENABLE_JIT_DEEPGEMM=0" in out
    assert seed_result.summary[:60] in out and "from the log" not in out
    assert "--speculative-num-steps" in out  # the fix's edit


def test_not_a_startup_crash_shows_the_tail() -> None:
    tail = [
        "The server is fired up and ready to roll!",
        "Traceback (most recent call last):",
        "RuntimeError: NCCL error",
    ]
    text = io.StringIO()
    CrashReport(result=None, tail=tail, status="not_startup", exit_code=1).render_text(
        Console(file=text, width=200)
    )
    out = text.getvalue()
    assert "not a start-up crash" in out and "RuntimeError: NCCL error" in out


# ------------------------------------------------------------------------ sending


@pytest.fixture(scope="module")
def team_api(kb_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real API on loopback with a key, its records in a scratch database."""
    db = tmp_path_factory.mktemp("run-report") / "records.sqlite"
    settings = kb_settings.model_copy(
        update={
            "replay_enabled": False,
            "on_demand_ingest": False,
            "triage_rate_per_minute": 0.0,
            "api_keys": [SecretStr("run-report-key")],
            "database_url": SecretStr(f"sqlite:///{db}"),
        }
    )
    with make_server(settings) as srv:
        yield srv.url


@pytest.fixture(scope="module")
def slack_stub() -> Iterator[SlackStub]:
    with running_stub(BOT_TOKEN) as stub:
        yield stub


def test_report_to_posts_the_crash_to_the_team_service(
    seed_result: TriageResult, team_api: str, kb_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _report(seed_result)
    monkeypatch.delenv(REPORT_KEY_ENV, raising=False)
    notes = send_report(report, report_to=team_api, slack_channel=None, settings=kb_settings)
    assert notes == [
        f"not sent to {team_api}/triage: HTTP 401 " + notes[0].split("HTTP 401 ", 1)[1]
    ]
    monkeypatch.setenv(REPORT_KEY_ENV, "run-report-key")
    notes = send_report(report, report_to=team_api + "/", slack_channel=None, settings=kb_settings)
    tid = report.sent["report_id"]
    assert notes == [f"sent to {team_api}/triage: triage {tid} ({team_api}/t/{tid})"]
    stored = httpx.get(
        f"{team_api}/triage/{tid}", headers={"authorization": "Bearer run-report-key"}
    ).json()
    answer = TriageResult.model_validate(stored["result"])
    assert answer.release.release == "0.5.11" and answer.parsed.hardware == "rtx-pro-6000-x8"
    assert answer.hardware is not None and answer.hardware.source == "request"  # the facts we sent
    assert (
        answer.location is not None and answer.location.citation == report.result.location.citation
    )


def test_a_network_error_is_a_note(seed_result: TriageResult, kb_settings: Settings) -> None:
    report = _report(seed_result)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    notes = send_report(report, report_to=url, slack_channel=None, settings=kb_settings)
    assert len(notes) == 1 and notes[0].startswith(f"not sent to {url}/triage: ConnectError")
    notes = send_report(
        _report(None, "not_startup"), report_to=url, slack_channel=None, settings=kb_settings
    )
    assert notes == [f"not sent to {url}: not a start-up crash"]


def test_slack_gets_the_report_with_its_facts(
    seed_result: TriageResult, kb_settings: Settings, slack_stub: SlackStub
) -> None:
    settings = kb_settings.model_copy(
        update={"slack_bot_token": SecretStr(BOT_TOKEN), "slack_api_url": f"{slack_stub.url}/api/"}
    )
    report = _report(seed_result)
    notes = send_report(
        report,
        report_to=None,
        slack_channel="C0RUN",
        thread_ts="1700000000.000100",
        settings=settings,
    )
    posted = slack_stub.calls_of("chat.postMessage", lambda p: p.get("channel") == "C0RUN")
    assert len(posted) == 1 and notes == [f"posted to Slack channel C0RUN (ts {posted[0]['_ts']})"]
    msg = posted[0]
    assert msg["thread_ts"] == "1700000000.000100" and report.sent["slack_ts"] == msg["_ts"]
    assert msg["text"].startswith("SGLang exited with exit code 1 before its ready line")
    blocks = str(msg["blocks"])
    assert "release: 0.5.11 exact (installed" in blocks and "rtx-pro-6000-x8 detected" in blocks
    assert "--speculative-num-steps" in blocks


def test_slack_without_a_token_or_with_a_wrong_one_is_a_note(
    seed_result: TriageResult, kb_settings: Settings, slack_stub: SlackStub
) -> None:
    report = _report(seed_result)
    bare = kb_settings.model_copy(
        update={"slack_bot_token": None, "slack_api_url": f"{slack_stub.url}/api/"}
    )
    assert send_report(report, report_to=None, slack_channel="C0X", settings=bare) == [
        "not sent to Slack channel C0X: TRIAGE_SLACK_BOT_TOKEN is not set"
    ]
    wrong = bare.model_copy(update={"slack_bot_token": SecretStr("xoxb-wrong")})
    assert send_report(report, report_to=None, slack_channel="C0X", settings=wrong) == [
        "not sent to Slack channel C0X: invalid_auth"
    ]
    assert send_report(
        _report(None, "ok"), report_to=None, slack_channel="C0X", settings=wrong
    ) == ["not sent to Slack channel C0X: SGLang exited normally"]
