"""The bot's pure pieces: text normalisation, follow-up reading, redaction, rate limits, blocks."""

from __future__ import annotations

import pytest

from service.engine import REDACTED, redact, redact_payload
from service.slack import blocks as sb
from service.slack.state import Seen, TokenBucket
from service.slack.text import (
    classify_followup,
    hardware_from_text,
    looks_like_log,
    normalize_text,
    split_options,
)


def test_normalize_undoes_slack_formatting() -> None:
    raw = (
        '<@U123ABC> ```python\nFile "<http://server_args.py|server_args.py>", line 3, in &lt;module&gt;\n'
        "a &amp;&amp; b <mailto:x@y.z|x@y.z>```"
    )
    text = normalize_text(raw)
    assert text.startswith('File "server_args.py", line 3, in <module>')
    assert "a && b x@y.z" in text and "```" not in text and "<@" not in text
    assert normalize_text("```python3 -m sglang.launch_server```").startswith("python3 -m")


def test_leading_options_are_split_off() -> None:
    opts, rest = split_options(
        "release=0.5.11 hw=h100-x8 arch=Foo\nTraceback (most recent call last):"
    )
    assert opts == {"release": "0.5.11", "hardware": "h100-x8", "model_arch": "Foo"}
    assert rest.startswith("Traceback")
    assert split_options("why?") == ({}, "why?")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("what about on H100?", "h100-x8"),
        ("and on 2x H200", "h200-x2"),
        ("try B200", "b200-x8"),
        ("on an RTX PRO 6000?", "rtx-pro-6000-x8"),
        ("A100 x4 please", "a100-x4"),
        ("what about h100-x2", "h100-x2"),
        ("on H20", "h20-x8"),
        ("cpu only?", "cpu"),
        ("why?", None),
        ("show the check", None),
        ("on 0.5.23?", None),
    ],
)
def test_gpu_words_map_to_profiles(text: str, expected: str | None) -> None:
    assert hardware_from_text(text) == expected


@pytest.mark.parametrize(
    "text, kind",
    [
        ("what about on H100?", "hardware"),
        ("on 0.5.23?", "release"),
        ("why?", "why"),
        ("why the AssertionError?", "why"),
        ("show the check", "check"),
        ("other fixes", "fixes"),
        ("what is unknown", "unknowns"),
        ("thanks!", "help"),
    ],
)
def test_follow_up_kinds(text: str, kind: str) -> None:
    assert classify_followup(text)[0] == kind
    assert not looks_like_log(text)


def test_logs_are_told_from_questions() -> None:
    assert looks_like_log("Traceback (most recent call last):\n  File ...")
    assert looks_like_log("python -m sglang.launch_server --model-path x")
    assert looks_like_log("AssertionError\n")


@pytest.mark.parametrize(
    "secret",
    [
        "xoxb-123456-abcdef-XYZ",
        "xoxp-1-2-3-abcdef",
        "xapp-1-A1-123-abcdef",
        "sk-proj-abcdefghijklmnop",
        "hf_abcdefghijklmnopqrstu",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_abcdefghijklmnopqrstuvwx",
    ],
)
def test_token_shapes_are_redacted(secret: str) -> None:
    out = redact(f"the key is {secret} ok")
    assert secret not in out and REDACTED in out and out.endswith(" ok")


def test_flag_and_env_values_are_redacted_but_flags_kept() -> None:
    cmd = (
        "python -m sglang.launch_server --api-key plainsecret --hf-token=another1 --admin-api-key 'q w' "
        "--speculative-num-draft-tokens 8 --max-total-tokens 100"
    )
    out = redact(cmd)
    assert "plainsecret" not in out and "another1" not in out and "q w" not in out
    assert "--api-key ***" in out and "--hf-token=***" in out
    assert "--speculative-num-draft-tokens 8 --max-total-tokens 100" in out
    env = redact(
        "HF_TOKEN=abc123 AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY "
        "ServerArgs(api_key='k3y', tp_size=8) Authorization: Bearer tok.en"
    )
    assert (
        "abc123" not in env
        and "wJalrXUtnFEMI" not in env
        and "k3y" not in env
        and "tok.en" not in env
    )
    assert "tp_size=8" in env
    assert redact("value shaped-anyhow-123", extra=["shaped-anyhow-123"]) == "value ***"
    payload = redact_payload({"blocks": [{"text": {"text": "--api-key zzz"}}], "n": 1})
    assert payload == {"blocks": [{"text": {"text": "--api-key ***"}}], "n": 1}


def test_token_bucket_limits_per_channel() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=1.0, burst=2, clock=lambda: now[0])
    assert bucket.try_take("C1") == 0.0 and bucket.try_take("C1") == 0.0
    assert bucket.try_take("C1") == pytest.approx(1.0)
    assert bucket.try_take("C2") == 0.0  # another channel has its own bucket
    assert not bucket.acquire("C1", max_wait=0.5)
    now[0] += 1.0
    assert bucket.acquire("C1", max_wait=0.0)


def test_seen_drops_duplicates() -> None:
    seen = Seen(max_items=2)
    assert seen.add("a") and not seen.add("a")
    assert seen.add("b") and seen.add("c")  # "a" evicted
    assert seen.add("a")


def test_mrkdwn_escapes_and_converts() -> None:
    text = sb.md_to_mrkdwn(
        "**Where:** `x<y` & [doc](https://e.x/a)\n- item\n```\ncode <a>\n```\nafter"
    )
    assert (
        text == "*Where:* `x&lt;y` &amp; <https://e.x/a|doc>\n• item\n```code &lt;a&gt;```\nafter"
    )
    blocks = sb.split_sections(
        "```" + "\n".join(["line"] * 2000) + "```", limit=500, max_sections=3
    )
    assert all(b["text"]["text"].count("```") % 2 == 0 for b in blocks if b["type"] == "section")
    assert blocks[-1]["type"] == "context"


def test_confirmed_blocks_replace_the_button() -> None:
    original = [
        sb.section("x"),
        {
            "type": "actions",
            "elements": [
                {"action_id": sb.FIXED_ACTION},
                {"action_id": sb.REPORT_ACTION, "url": "http://r"},
            ],
        },
    ]
    out = sb.confirmed_blocks(original, "U1", "python -m sglang.launch_server")
    assert out[1]["type"] == "context" and "<@U1>" in out[1]["elements"][0]["text"]
    assert out[2]["elements"] == [{"action_id": sb.REPORT_ACTION, "url": "http://r"}]


def test_manifest_declares_the_scopes_events_and_command() -> None:
    from pathlib import Path

    import yaml

    manifest = yaml.safe_load((Path(__file__).parents[3] / "slack" / "manifest.yaml").read_text())
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert scopes == {
        "app_mentions:read",
        "chat:write",
        "im:history",
        "im:read",
        "files:read",
        "commands",
    }
    settings = manifest["settings"]
    assert set(settings["event_subscriptions"]["bot_events"]) == {"app_mention", "message.im"}
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["interactivity"]["request_url"].endswith("/slack/events")
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == ["/sglang-triage"]


def test_socket_mode_uses_the_app_token_and_the_configured_api(monkeypatch, tmp_path) -> None:
    import slack_bolt.adapter.socket_mode as sm

    from kb.errors import ConfigError
    from kb.records import Records
    from service.settings import Settings
    from service.slack.serve import mount_slack, run_socket_mode

    started: dict = {}

    class FakeHandler:
        def __init__(self, app, app_token, web_client=None) -> None:
            started.update(app=app, token=app_token, client=web_client)

        def start(self) -> None:
            started["started"] = True

    monkeypatch.setattr(sm, "SocketModeHandler", FakeHandler)
    settings = Settings(
        kb_dir=tmp_path,
        slack_bot_token="xoxb-1-2-abcdef",
        slack_app_token="xapp-1-A1-2-abcdef",
        slack_api_url="http://127.0.0.1:9/api",
    )
    records = Records(tmp_path / "records.sqlite")
    run_socket_mode(settings, engine_factory=lambda: None, records=records)  # type: ignore[arg-type,return-value]
    assert started["started"] and started["token"] == "xapp-1-A1-2-abcdef"
    assert started["client"].base_url == "http://127.0.0.1:9/api/"
    assert started["client"].token == "xoxb-1-2-abcdef"
    with pytest.raises(ConfigError, match="TRIAGE_SLACK_APP_TOKEN"):
        run_socket_mode(settings.model_copy(update={"slack_app_token": None}), records=records)
    from fastapi import FastAPI

    with pytest.raises(ConfigError, match="SIGNING_SECRET"):
        mount_slack(FastAPI(), settings, engine_factory=lambda: None, records=records)  # type: ignore[arg-type,return-value]


def test_default_engine_and_records_are_the_apis(kb_settings, kb) -> None:
    from service.engine.triage import Engine
    from service.slack.serve import default_parts
    from service.wiring import records_for

    factory, records = default_parts(kb_settings, None, None)
    assert isinstance(factory(), Engine)
    assert records is records_for(kb_settings)
