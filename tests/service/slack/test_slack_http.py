"""The Slack bot over real HTTP: signed requests in, Web API calls recorded by the stub."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from kb.records import Records
from service.slack.bot import SlackTriageBot
from service.usecase import TriageUseCase

from .conftest import BOT_TOKEN, SlackClient
from .stub import BOT_USER, SlackStub

_ids = itertools.count(1)


def _ts() -> str:
    return f"1700000000.{next(_ids):06d}"


def _eid() -> str:
    return f"Ev{time.time_ns()}{next(_ids)}"


def _mention(channel: str, text: str, ts: str, thread_ts: str | None = None) -> dict[str, Any]:
    ev = {
        "type": "app_mention",
        "user": "U0USER",
        "text": f"<@{BOT_USER}> {text}",
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts:
        ev["thread_ts"] = thread_ts
    return ev


def _flat(payload: dict[str, Any]) -> str:
    """Everything visible in a posted message, as one string."""
    return json.dumps([payload.get("text"), payload.get("blocks")], ensure_ascii=False)


def _in_thread(channel: str, thread: str):
    return lambda p: p.get("channel") == channel and p.get("thread_ts") == thread


class Held:
    """Holds every call of ``owner.name`` (made on the bot's worker threads) until the test
    saw Slack's request answered (:meth:`acked`), recording the order of both sides.

    The ack arriving while the call is held proves the ack did not wait for it: an ack that
    waited would never arrive (the client times out, :meth:`send` says so)."""

    def __init__(self, monkeypatch, owner: object, name: str) -> None:
        self.events: list[str] = []
        self.released = threading.Event()
        real = getattr(owner, name)

        def held(*args: Any, **kwargs: Any) -> Any:
            self.events.append("started")
            self.released.wait(120)  # only a deadlock breaker: released once acked
            try:
                return real(*args, **kwargs)
            finally:
                self.events.append("finished")

        monkeypatch.setattr(owner, name, held)

    def send(self, request: Callable[[], httpx.Response]) -> httpx.Response:
        try:
            return request()
        except httpx.ReadTimeout:
            pytest.fail("no ack while the work was held: the ack waits for it")
        finally:
            self.events.append("acked")
            self.released.set()

    def assert_acked_first(self) -> None:
        assert "finished" in self.events, self.events  # the work ran through the hold
        assert self.events.index("acked") < self.events.index("finished"), self.events


def _triage_in(slack: SlackClient, stub: SlackStub, channel: str, log: str) -> tuple[str, dict]:
    ts = _ts()
    r = slack.event(_mention(channel, f"```{log}```", ts), _eid())
    assert r.status_code == 200
    return ts, stub.wait_for("chat.postMessage", _in_thread(channel, ts))[0]


def test_signed_mention_gets_a_threaded_reply_with_the_fix(
    slack, slack_stub, seed_log, seed_fix, slack_server, monkeypatch
) -> None:
    ts = _ts()
    triage = Held(
        monkeypatch, TriageUseCase, "answer_and_store"
    )  # the bot's triage waits for the ack
    r = triage.send(lambda: slack.event(_mention("C0MENTION", f"```{seed_log}```", ts), _eid()))
    assert r.status_code == 200
    reply = slack_stub.wait_for("chat.postMessage", _in_thread("C0MENTION", ts))[0]
    triage.assert_acked_first()  # acked before the triage ran
    text = _flat(reply)
    assert seed_fix in text
    assert "ServerArgs._handle_speculative_decoding" in text
    assert "0.5.11:sglang/srt/server_args.py:3519-3522" in text
    assert "assert (" in text and "release *0.5.11*" in text and "confidence *" in text
    # the full-report link resolves on the same app
    url = next(
        e["url"]
        for b in reply["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e.get("url")
    )
    assert url.startswith(f"{slack_server.url}/t/")  # the web page of the stored triage
    page = httpx.get(url, timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    got = httpx.get(url.replace("/t/", "/triage/"), timeout=10)
    assert got.status_code == 200 and got.json()["result"]["fixes"][0]["command"] == seed_fix


def test_bad_signature_and_stale_timestamp_are_refused(slack, slack_stub, seed_log) -> None:
    before = len(slack_stub.calls_of("chat.postMessage"))
    bad = slack.event(_mention("C0BAD", seed_log, _ts()), _eid(), secret="not-the-secret")
    stale = slack.event(
        _mention("C0BAD", seed_log, _ts()), _eid(), timestamp=int(time.time()) - 600
    )
    assert bad.status_code == 401
    assert stale.status_code == 401
    time.sleep(1.0)
    assert len(slack_stub.calls_of("chat.postMessage")) == before
    assert not slack_stub.calls_of("chat.postMessage", lambda p: p.get("channel") == "C0BAD")


def test_a_retried_event_is_answered_once(slack, slack_stub, seed_log) -> None:
    ts, eid = _ts(), _eid()
    event = _mention("C0RETRY", f"```{seed_log}```", ts)
    assert slack.event(event, eid).status_code == 200
    retry = slack.event(
        event, eid, headers={"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}
    )
    assert retry.status_code == 200
    slack_stub.wait_for("chat.postMessage", _in_thread("C0RETRY", ts))
    time.sleep(1.5)
    assert len(slack_stub.calls_of("chat.postMessage", _in_thread("C0RETRY", ts))) == 1


def test_follow_ups_are_answered_in_the_same_thread(
    slack, slack_stub, seed_log, slack_bot: SlackTriageBot
) -> None:
    root, first = _triage_in(slack, slack_stub, "C0FOLLOW", seed_log)
    assert "hardware `h100-x8`" not in _flat(first)
    # "what about on H100?" re-runs the engine with the h100-x8 profile
    assert (
        slack.event(
            _mention("C0FOLLOW", "what about on H100?", _ts(), thread_ts=root), _eid()
        ).status_code
        == 200
    )
    second = slack_stub.wait_for("chat.postMessage", _in_thread("C0FOLLOW", root), count=2)[1]
    text = _flat(second)
    assert "hardware `h100-x8`" in text and "Re-evaluated with hardware `h100-x8`" in text
    ctx = slack_bot.threads.get("C0FOLLOW", root)
    assert ctx is not None and ctx.options["hardware"] == "h100-x8"
    stored = slack_bot.records.get(ctx.tid)
    assert stored is not None and stored["request"]["options"]["hardware"] == "h100-x8"
    # "why?" is answered from the stored context
    assert (
        slack.event(_mention("C0FOLLOW", "why?", _ts(), thread_ts=root), _eid()).status_code == 200
    )
    third = slack_stub.wait_for("chat.postMessage", _in_thread("C0FOLLOW", root), count=3)[2]
    assert "*Why:*" in _flat(third) and "speculative_num_draft_tokens" in _flat(third)
    # "show the check" gives the excerpt and the condition
    assert (
        slack.event(
            _mention("C0FOLLOW", "show the check", _ts(), thread_ts=root), _eid()
        ).status_code
        == 200
    )
    fourth = slack_stub.wait_for("chat.postMessage", _in_thread("C0FOLLOW", root), count=4)[3]
    assert "*The check*" in _flat(fourth) and "*Condition:*" in _flat(fourth)


def test_dm_with_an_uploaded_log_file(slack, slack_stub, seed_log, seed_fix) -> None:
    slack_stub.files["F0CRASH"] = seed_log
    ts = _ts()
    event = {
        "type": "message",
        "subtype": "file_share",
        "channel_type": "im",
        "channel": "D0DM",
        "user": "U0USER",
        "text": "",
        "ts": ts,
        "event_ts": ts,
        "files": [
            {
                "id": "F0CRASH",
                "name": "crash.log",
                "mimetype": "text/plain",
                "filetype": "text",
                "size": len(seed_log),
                "mode": "hosted",
                "url_private_download": f"{slack_stub.url}/files/F0CRASH",
            }
        ],
    }
    assert slack.event(event, _eid()).status_code == 200
    reply = slack_stub.wait_for("chat.postMessage", _in_thread("D0DM", ts))[0]
    assert seed_fix in _flat(reply)
    assert {"id": "F0CRASH", "auth": f"Bearer {BOT_TOKEN}"} in slack_stub.downloads


def test_a_partial_file_object_is_completed_with_files_info(
    slack, slack_stub, seed_log, seed_fix
) -> None:
    slack_stub.files["F0INFO"] = seed_log
    ts = _ts()
    event = {
        "type": "app_mention",
        "user": "U0USER",
        "text": f"<@{BOT_USER}>",
        "ts": ts,
        "channel": "C0INFO",
        "files": [{"id": "F0INFO", "file_access": "check_file_info"}],
    }
    assert slack.event(event, _eid()).status_code == 200
    reply = slack_stub.wait_for("chat.postMessage", _in_thread("C0INFO", ts))[0]
    assert seed_fix in _flat(reply)
    assert slack_stub.calls_of("files.info", lambda p: p.get("file") == "F0INFO")


def test_slash_command_acks_fast_then_posts(
    slack, slack_stub, seed_log, seed_fix, monkeypatch
) -> None:
    triage = Held(monkeypatch, TriageUseCase, "answer_and_store")
    r = triage.send(lambda: slack.command(seed_log, "C0SLASH", f"{slack_stub.url}/response/slash1"))
    assert r.status_code == 200
    assert "Triaging" in r.text
    reply = slack_stub.wait_for("chat.postMessage", lambda p: p.get("channel") == "C0SLASH")[0]
    assert seed_fix in _flat(reply) and reply.get("thread_ts") is None
    triage.assert_acked_first()  # the "Triaging…" ack came before the triage ran


def test_this_fixed_it_button_records_the_incident(
    slack, slack_stub, seed_log, slack_bot, monkeypatch
) -> None:
    root, reply = _triage_in(slack, slack_stub, "C0FIXED", seed_log)
    button = next(
        e
        for b in reply["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == "triage_fixed"
    )
    tid = json.loads(button["value"])["t"]
    msg_ts = reply["_ts"]
    payload = {
        "type": "block_actions",
        "user": {"id": "U0FIXER"},
        "team": {"id": "T0STUB"},
        "api_app_id": "A0STUB",
        "trigger_id": "1.2.3",
        "channel": {"id": "C0FIXED"},
        "container": {"type": "message", "message_ts": msg_ts, "channel_id": "C0FIXED"},
        "message": {
            "type": "message",
            "ts": msg_ts,
            "thread_ts": root,
            "text": reply["text"],
            "blocks": reply["blocks"],
        },
        "response_url": f"{slack_stub.url}/response/fixed",
        "actions": [
            {
                **button,
                "block_id": "triage_actions",
                "type": "button",
                "action_ts": str(time.time()),
            }
        ],
    }
    records: Records = slack_bot.records
    confirm = Held(monkeypatch, records, "confirm")  # the click is recorded after the ack
    assert confirm.send(lambda: slack.action(payload)).status_code == 200
    deadline = time.monotonic() + 30
    while (records.get(tid) or {}).get("confirmation") is None:
        assert time.monotonic() < deadline, "no confirmation recorded"
        time.sleep(0.05)
    conf = records.get(tid)["confirmation"]
    assert conf["source"] == "slack" and "U0FIXER" in conf["note"]
    assert conf["fix"]["recommended"] is True
    update = slack_stub.wait_for("chat.update", lambda p: p.get("ts") == msg_ts)[0]
    assert "Confirmed by" in _flat(update) and "triage_fixed" not in _flat(update)
    slack_stub.wait_for(
        "chat.postMessage",
        lambda p: p.get("channel") == "C0FIXED" and "recorded as an incident" in _flat(p),
    )
    confirm.assert_acked_first()  # acked before the confirmation was recorded


def test_secrets_in_a_pasted_log_are_redacted(slack, slack_stub, seed_log, slack_bot) -> None:
    secrets = [
        "sk-proj-abcdefghijklmnop1234567890",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
        "xoxb-9999999999-8888888888-leakedLeakedLeaked",
        "AKIAIOSFODNN7EXAMPLE",
        "xapp-1-A0000-123-abcdefabcdef",
        "mysecretvalue123",
        BOT_TOKEN,
    ]
    log = seed_log.replace(
        "--tp 8", "--tp 8 --api-key sk-proj-abcdefghijklmnop1234567890 --hf-token mysecretvalue123"
    )
    log = (
        "export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345\n"
        "SLACK_BOT_TOKEN=xoxb-9999999999-8888888888-leakedLeakedLeaked\n"
        "aws key AKIAIOSFODNN7EXAMPLE, app xapp-1-A0000-123-abcdefabcdef, bot "
        + BOT_TOKEN
        + "\n"
        + log
    )
    root, reply = _triage_in(slack, slack_stub, "C0SECRET", log)
    text = _flat(reply)
    assert "***" in text
    for secret in secrets:
        assert secret not in text
    assert "--speculative-algorithm EAGLE3" in text  # still the real fix
    ctx = slack_bot.threads.get("C0SECRET", root)
    stored = json.dumps(slack_bot.records.get(ctx.tid))
    for secret in secrets:
        assert secret not in stored
    # follow-ups from that context stay clean too
    slack.event(_mention("C0SECRET", "other fixes", _ts(), thread_ts=root), _eid())
    more = slack_stub.wait_for("chat.postMessage", _in_thread("C0SECRET", root), count=2)[1]
    assert all(s not in _flat(more) for s in secrets)


def test_a_question_without_a_log_gets_help(slack, slack_stub) -> None:
    ts = _ts()
    slack.event(_mention("C0HELP", "hello there", ts), _eid())
    reply = slack_stub.wait_for("chat.postMessage", _in_thread("C0HELP", ts))[0]
    assert "Paste an SGLang crash log" in _flat(reply)


def test_url_verification_challenge(slack) -> None:
    body = json.dumps(
        {"token": "legacy", "challenge": "abc123", "type": "url_verification"}
    ).encode()
    r = slack.post(body, "application/json")
    assert r.status_code == 200 and "abc123" in r.text


def test_malformed_timestamps_and_replayed_commands_are_refused(
    slack,
    slack_stub,
    slack_server,
) -> None:
    r = slack.http.post(
        "/slack/events",
        content=b"{}",
        headers={
            "content-type": "application/json",
            "x-slack-request-timestamp": "not-a-number",
            "x-slack-signature": "v0=00",
        },
    )
    assert r.status_code == 401
    ts = int(time.time())
    first = slack.command("help", "C0REPLAY", f"{slack_stub.url}/response/replay1", timestamp=ts)
    assert first.status_code == 200
    again = slack.command("help", "C0REPLAY", f"{slack_stub.url}/response/replay1", timestamp=ts)
    assert again.status_code == 401 and "replayed" in again.text


def test_a_body_bolt_cannot_parse_is_a_400(slack_server) -> None:
    """Bolt parses the body before checking the signature: a form post whose body starts
    with ``{`` but is no JSON (a case the fuzz below found) is refused, not a 500."""
    r = httpx.post(
        f"{slack_server.url}/slack/events",
        content="{Iñ not json".encode(),
        headers={
            "content-type": "application/x-www-form-urlencoded",
            "x-slack-request-timestamp": str(int(time.time())),
            "x-slack-signature": "v0=00",
        },
        timeout=30,
    )
    assert r.status_code == 400 and "neither JSON nor form data" in r.text


def test_fuzzed_slack_requests_never_get_a_server_error(slack_server) -> None:
    """Whatever arrives at /slack/events (any body, type, timestamp, signature): never a 5xx."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    with httpx.Client(base_url=slack_server.url, timeout=30) as http:

        @settings(
            max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(
            body=st.binary(max_size=2000)
            | st.text(max_size=500).map(str.encode)
            | st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                lambda inner: (
                    st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4)
                ),
                max_leaves=12,
            ).map(lambda v: json.dumps(v).encode()),
            ctype=st.sampled_from(
                ["application/json", "application/x-www-form-urlencoded", "text/plain", ""]
            ),
            ts=st.one_of(st.just(str(int(time.time()))), st.text(max_size=12)),
            sig=st.text(alphabet="v0=abcdef0123456789", max_size=70),
        )
        def check(body: bytes, ctype: str, ts: str, sig: str) -> None:
            headers = {"content-type": ctype, "x-slack-signature": sig}
            # a value a client can send (httpx itself refuses blanks at its ends)
            if ts.isprintable() and ts.isascii() and ts == ts.strip():
                headers["x-slack-request-timestamp"] = ts
            r = http.post("/slack/events", content=body, headers=headers)
            assert r.status_code < 500, (r.status_code, body[:80], ctype, ts)

        check()


def test_a_response_url_outside_slacks_hosts_is_never_posted_to(slack, slack_stub) -> None:
    """A slash command whose response_url names another host (here loopback under another
    name) gets nothing posted there; the allowed stub host still does."""
    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Catch()
    logging.getLogger("sglang_triage.slack").addHandler(handler)
    try:
        evil = slack_stub.url.replace("127.0.0.1", "localhost") + "/response/evil"
        assert (
            slack.command("this is not a crash log at all " * 4, "C0EVIL", evil).status_code == 200
        )
        deadline = time.monotonic() + 120
        while not any("response_url" in m for m in seen):
            assert time.monotonic() < deadline, "the response_url was not refused"
            time.sleep(0.05)
        good = f"{slack_stub.url}/response/good"
        assert (
            slack.command("this is not a crash log at all " * 4, "C0GOOD", good).status_code == 200
        )
        slack_stub.wait_for("response_url", lambda p: p.get("id") == "good")
    finally:
        logging.getLogger("sglang_triage.slack").removeHandler(handler)
    assert not [p for p in slack_stub.calls_of("response_url") if p.get("id") == "evil"]


def test_response_url_hosts() -> None:
    from service.slack.replies import allowed_response_url

    hosts = ["hooks.slack.com", "127.0.0.1"]
    assert allowed_response_url("https://hooks.slack.com/commands/T/1/x", hosts)
    assert not allowed_response_url("http://hooks.slack.com/commands/T/1/x", hosts)
    assert allowed_response_url("http://127.0.0.1:9/response/x", hosts)
    for bad in (
        "https://hooks.slack.com.evil.test/x",
        "https://evil.test/hooks.slack.com",
        "https://user@evil.test/x",
        "https://hooks.slack.com:99999/x",
        "http://169.254.169.254/latest/meta-data",
        "file:///etc/passwd",
    ):
        assert not allowed_response_url(bad, hosts), bad


def _click(slack, reply: dict, root: str, channel: str, user: str) -> None:
    button = next(
        e
        for b in reply["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == "triage_fixed"
    )
    msg_ts = reply["_ts"]
    payload = {
        "type": "block_actions",
        "user": {"id": user},
        "team": {"id": "T0STUB"},
        "api_app_id": "A0STUB",
        "trigger_id": "1.2.3",
        "channel": {"id": channel},
        "container": {"type": "message", "message_ts": msg_ts, "channel_id": channel},
        "message": {
            "type": "message",
            "ts": msg_ts,
            "thread_ts": root,
            "text": reply["text"],
            "blocks": reply["blocks"],
        },
        "actions": [
            {
                **button,
                "block_id": "triage_actions",
                "type": "button",
                "action_ts": str(time.time()),
            }
        ],
    }
    assert slack.action(payload).status_code == 200


def test_only_the_user_who_confirmed_may_change_a_confirmation(
    slack,
    slack_stub,
    seed_log,
    slack_bot,
) -> None:
    root, reply = _triage_in(slack, slack_stub, "C0OWNED", seed_log)
    tid = json.loads(
        next(
            e
            for b in reply["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == "triage_fixed"
        )["value"]
    )["t"]
    assert slack_bot.records.owners(tid)[0] == "slack:U0USER"  # the asker owns the triage
    _click(slack, reply, root, "C0OWNED", "U0FIXER")  # a teammate confirms first: allowed
    slack_stub.wait_for(
        "chat.postMessage",
        lambda p: p.get("channel") == "C0OWNED" and "recorded as an incident" in _flat(p),
    )
    _click(slack, reply, root, "C0OWNED", "U0OTHER")  # someone else may not overwrite it
    slack_stub.wait_for(
        "chat.postMessage",
        lambda p: p.get("channel") == "C0OWNED" and "already confirmed by someone else" in _flat(p),
    )
    conf = slack_bot.records.get(tid)["confirmation"]
    assert "U0FIXER" in conf["note"] and "U0OTHER" not in conf["note"]
