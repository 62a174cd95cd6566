"""Settings of the service, read from the environment (prefix ``TRIAGE_``) and an optional ``.env``.

Front ends receive a :class:`Settings` instance by dependency injection
(FastAPI ``Depends(get_settings)``); tests build their own or override it.
:class:`Settings` extends :class:`service.engine.settings.EngineSettings` (cache, KB,
Chroma, embedding model, LLM) and :class:`service.replay.settings.ReplaySettings` (where
replay runs, the warm pool, the fix search) with the API, on-demand ingest and Slack settings.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr

from kb.settings import DEFAULT_RELEASES
from service.engine import EngineSettings
from service.replay.settings import ReplaySettings

__all__ = [
    "DEFAULT_RELEASES",
    "ReplaySettings",
    "Settings",
    "env_example",
    "get_settings",
    "reveal",
]


def reveal(value: SecretStr | str | None) -> str | None:
    """The plain text of a secret setting (``None`` stays ``None``).

    Secrets are :class:`~pydantic.SecretStr` so that they never show in ``repr``, logs or
    ``model_dump``; only the code that sends them (the key check, the Slack client) calls
    this. A plain ``str`` passes through: ``model_copy(update=...)`` does not validate, so a
    copy may hold one.
    """
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return value


class Settings(EngineSettings, ReplaySettings):
    """Runtime configuration of every sglang-triage front end.

    Replay's fields (``replay_*``, ``fix_search_*``) are :class:`ReplaySettings`', inherited
    under the same names and variables (``TRIAGE_REPLAY_ENABLED``...)."""

    # service
    api_keys: list[SecretStr] = Field(
        default_factory=list, description="Bearer keys (secret); empty = open."
    )
    team_api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Team bearer keys (secret): accepted like "
        "TRIAGE_API_KEYS, and read and confirm every client's triages (other keys only their own).",
    )
    max_body_bytes: int = 1024 * 1024
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the API answers to; empty = the loopback "
        "names and the host of TRIAGE_PUBLIC_URL (DNS-rebinding guard).",
    )
    records_max_age_days: float | None = Field(
        30.0, description="Unconfirmed triages older than this are purged (None: kept)."
    )
    records_max_count: int | None = Field(
        100_000, description="At most this many unconfirmed triages are kept (oldest purged)."
    )
    records_max_bytes: int | None = Field(
        1 << 30,
        description="Stored triages use at most this many bytes (request and answer "
        "text); beyond it the oldest unconfirmed ones are purged (None: no byte bound).",
    )
    records_min_free_bytes: int = Field(
        256 << 20,
        description="When the records' disk has less free space than this, new "
        "triages are answered but not stored (the answer says so).",
    )
    triage_rate_per_minute: float = Field(
        120.0,
        ge=0,
        description="POST /triage requests a client (a key, or an address on an "
        "open service) may send a minute, per process; beyond it 429 with Retry-After (0: off; "
        "team keys are not limited).",
    )
    triage_burst: int = Field(
        60,
        ge=1,
        description="POST /triage requests a client may send at once before the rate applies.",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="`serve` closes a connection whose request line and headers "
        "have not all arrived this many seconds after it opened (or after its last answer).",
    )

    database_url: SecretStr | None = Field(
        None,
        description="Records, Slack state and replay jobs in this database "
        "(postgresql://user:password@host/db, or sqlite:///path; secret: it may hold a "
        "password); unset: <kb>/records.sqlite, Slack state in memory, replay in-process.",
    )
    on_demand_ingest: bool = Field(
        True, description="Index a release the log names but the KB lacks, then answer from it."
    )
    on_demand_embed: bool = Field(
        True,
        description="Embed a release ingested on demand, in the ingest's own process, "
        "when Chroma is a server (TRIAGE_CHROMA_URL); embedded Chroma is one process's, so "
        "there the release is searched by keywords (off: keywords always).",
    )
    on_demand_per_client_per_hour: int = Field(
        3,
        ge=0,
        description="New releases one client may have ingested on demand per hour "
        "(the next one is refused with a note).",
    )
    on_demand_global_per_hour: int = Field(
        20, ge=0, description="New releases ingested on demand per hour, all clients together."
    )
    on_demand_timeout_s: float = Field(
        900.0,
        gt=0,
        description="An on-demand ingest (its child process) is stopped after this "
        "long and counts as failed.",
    )
    release_list_ttl_s: float = Field(
        3600.0,
        ge=0,
        description="How long the package index's release list is reused; only "
        "listed versions are fetched on demand.",
    )
    disk_quota_gb: float = Field(
        10.0,
        ge=0,
        description="Before an on-demand ingest, the KB, wheel and source caches "
        "must hold less than this: least recently used on-demand releases are evicted (never "
        "the defaults), else the ingest is refused (0: no quota).",
    )

    # slack
    slack_bot_token: SecretStr | None = Field(
        None,
        description="xoxb- bot token (secret); with the signing secret, enables /slack/events.",
    )
    slack_signing_secret: SecretStr | None = Field(
        None, description="Signing secret of the Slack app (secret), checks /slack/events."
    )
    slack_app_token: SecretStr | None = Field(
        None, description="xapp- token for Socket Mode (secret)."
    )
    slack_api_url: str | None = Field(None, description="Slack Web API base URL (tests: a stub).")
    slack_response_hosts: list[str] = Field(
        default_factory=lambda: ["hooks.slack.com", "hooks.slack-gov.com"],
        description="Hosts a slash command's response_url may name (https only, except "
        "loopback hosts listed here for tests); others are never posted to.",
    )
    public_url: str = Field("http://127.0.0.1:8000", description="Base URL for report links.")

    def api_key_values(self) -> list[str]:
        """The bearer keys in plain text (for the constant-time comparison only)."""
        return [k for k in (reveal(key) for key in self.api_keys) if k]


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (FastAPI dependency)."""
    return Settings()


#: What the fields without a description of their own mean (for :func:`env_example`).
_MEANING = {
    "home": "Cache root: wheels/, sources/, kb/, git/.",
    "embedding_batch_size": "Chunks embedded per batch at ingest.",
    "releases": "Releases `ingest --defaults` and `make run` ingest (JSON list).",
    "llm_base_url": "OpenAI-compatible endpoint for LLM-written explanations; unset = no LLM.",
    "llm_model": "Model name at that endpoint.",
    "llm_timeout_s": "Seconds before an LLM answer is abandoned (the deterministic one stays).",
    "max_body_bytes": "Request body limit on every route (plus 64 KiB for a JSON envelope).",
}
#: Defaults that depend on the machine, written as they are computed.
_SHOWN = {"home": "~/.cache/sglang-triage", "embedding_model": ""}


def env_example(model: type[BaseModel] = Settings) -> str:
    """The text of ``.env.example``: every field of ``model`` as a commented-out
    ``TRIAGE_NAME=default`` line under a one-line comment (its description, "(secret)" for
    :class:`SecretStr` fields). Lists are JSON, as pydantic-settings reads them; unset values
    are empty. Regenerate with ``python -m service.settings > .env.example``.
    """
    lines = [
        "# Every TRIAGE_* setting of sglang-triage with its default (docs/configuration.md).",
        "# Copy to .env (read from the working directory) and uncomment what you change.",
        "# Generated by `python -m service.settings > .env.example`; a test checks it is complete.",
        "",
    ]
    for name, field in model.model_fields.items():
        meaning = " ".join((field.description or _MEANING.get(name, name)).split())
        if "SecretStr" in repr(field.annotation) and "secret" not in meaning:
            meaning += " (secret)"
        if name in _SHOWN:
            shown = _SHOWN[name]
        else:
            value = field.get_default(call_default_factory=True)
            shown = (
                ""
                if value is None
                else json.dumps(value)
                if isinstance(value, list | dict)
                else str(value).lower()
                if isinstance(value, bool)
                else str(value)
                if isinstance(value, str | int | float | Path)
                else ""
            )
        lines += [f"# {meaning}", f"# TRIAGE_{name.upper()}={shown}", ""]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - `python -m service.settings > .env.example`
    sys.stdout.write(env_example())
