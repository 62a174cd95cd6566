"""Settings of the service, read from the environment (prefix ``TRIAGE_``) and an optional ``.env``.

Front ends receive a :class:`Settings` instance by dependency injection
(FastAPI ``Depends(get_settings)``); tests build their own or override it.
:class:`Settings` extends :class:`service.engine.settings.EngineSettings` (cache, KB,
Chroma, embedding model, LLM) with the API, replay and Slack settings.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field

from kb.settings import DEFAULT_RELEASES
from service.engine import EngineSettings

__all__ = ["DEFAULT_RELEASES", "Settings", "get_settings"]


class Settings(EngineSettings):
    """Runtime configuration of every sglang-triage front end."""

    # service
    api_keys: list[str] = Field(default_factory=list, description="Bearer keys; empty = open.")
    max_body_bytes: int = 1024 * 1024
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host names the API answers to; empty = the loopback "
        "names and the host of TRIAGE_PUBLIC_URL (DNS-rebinding guard).")
    records_max_age_days: float | None = Field(
        30.0, description="Unconfirmed triages older than this are purged (None: kept).")
    records_max_count: int | None = Field(
        100_000, description="At most this many unconfirmed triages are kept (oldest purged).")

    replay_enabled: bool = Field(True, description="Verify fixes by replay in the background.")
    on_demand_ingest: bool = Field(
        True, description="Index a release the log names but the KB lacks, then answer from it.")
    on_demand_embed: bool = Field(
        True, description="Then embed it on a background thread (off: keyword search only).")

    # slack
    slack_bot_token: str | None = None
    slack_signing_secret: str | None = None
    slack_app_token: str | None = Field(None, description="xapp- token for Socket Mode.")
    slack_api_url: str | None = Field(None, description="Slack Web API base URL (tests: a stub).")
    public_url: str = Field("http://127.0.0.1:8000", description="Base URL for report links.")



@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (FastAPI dependency)."""
    return Settings()
