"""The service's settings: secrets stay secret, and ``.env.example`` lists every setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from service.settings import Settings, env_example, reveal

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "api_keys": ["key-AAAA1111"],
    "slack_bot_token": "xoxb-BBBB2222",
    "slack_signing_secret": "sign-CCCC3333",
    "slack_app_token": "xapp-DDDD4444",
    "llm_api_key": "sk-EEEE5555",
    "database_url": "postgresql://triage:pw-FFFF6666@db.internal/triage",
}
PLAIN = [
    "key-AAAA1111",
    "xoxb-BBBB2222",
    "sign-CCCC3333",
    "xapp-DDDD4444",
    "sk-EEEE5555",
    "pw-FFFF6666",
]


def test_secrets_never_show_in_repr_str_or_dumps(tmp_path: Path) -> None:
    settings = Settings(kb_dir=tmp_path, **SECRETS)
    for text in (
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        repr(settings.model_dump()),
        str(settings.model_dump(mode="json")),
    ):
        leaked = [s for s in PLAIN if s in text]
        assert leaked == [], text
    assert "**********" in settings.model_dump_json()


def test_secrets_are_read_from_the_environment_and_revealed_only_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIAGE_API_KEYS", '["k1", "k2"]')
    monkeypatch.setenv("TRIAGE_SLACK_BOT_TOKEN", "xoxb-env")
    monkeypatch.setenv("TRIAGE_LLM_API_KEY", "sk-env")
    settings = Settings(kb_dir=tmp_path)
    assert all(isinstance(k, SecretStr) for k in settings.api_keys)
    assert settings.api_key_values() == ["k1", "k2"]
    assert reveal(settings.slack_bot_token) == "xoxb-env"
    assert reveal(settings.llm_api_key) == "sk-env"
    assert reveal(settings.slack_app_token) is None
    # a copy made without validation (tests, model_copy(update=...)) may hold plain strings
    copy = settings.model_copy(update={"api_keys": ["plain"], "slack_bot_token": "xoxb-plain"})
    assert copy.api_key_values() == ["plain"] and reveal(copy.slack_bot_token) == "xoxb-plain"


def _example_vars() -> dict[str, str]:
    """``TRIAGE_NAME`` -> the comment above it, for every variable ``.env.example`` lists."""
    lines = (ROOT / ".env.example").read_text().splitlines()
    found = {}
    for i, line in enumerate(lines):
        m = re.fullmatch(r"#? ?(TRIAGE_[A-Z0-9_]+)=.*", line)
        if m:
            assert (
                i > 0
                and lines[i - 1].startswith("# ")
                and not re.match(r"# TRIAGE_\w+=", lines[i - 1])
            ), f"{m.group(1)} has no one-line comment above it"
            found[m.group(1)] = lines[i - 1]
    return found


def test_env_example_lists_every_setting_and_nothing_else() -> None:
    listed = _example_vars()
    fields = {f"TRIAGE_{name.upper()}" for name in Settings.model_fields}
    assert sorted(fields - set(listed)) == [], (
        "regenerate: python -m service.settings > .env.example"
    )
    assert sorted(set(listed) - fields) == []


def test_env_example_shows_the_defaults() -> None:
    text = env_example()
    assert "# TRIAGE_MAX_BODY_BYTES=1048576\n" in text
    assert '# TRIAGE_RELEASES=["0.5.9", "0.5.11", "0.5.23"]\n' in text
    assert "# TRIAGE_REPLAY_ENABLED=true\n" in text and "# TRIAGE_CHROMA_URL=\n" in text
    assert "(secret)" in text.split("TRIAGE_SLACK_APP_TOKEN")[0].rsplit("\n\n", 1)[1]
