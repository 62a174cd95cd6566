"""Settings of the service, read from the environment (prefix ``TRIAGE_``) and an optional ``.env``.

Front ends receive a :class:`Settings` instance by dependency injection
(FastAPI ``Depends(get_settings)``); tests build their own or override it.
:class:`Settings` extends :class:`kb.settings.KBSettings` (cache, KB, Chroma,
embedding model) with the API, LLM, replay and Slack settings.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field

from kb.settings import DEFAULT_RELEASES, KBSettings

__all__ = ["DEFAULT_RELEASES", "Settings", "get_settings"]


class Settings(KBSettings):
    """Runtime configuration of every sglang-triage front end."""

    # service
    api_keys: list[str] = Field(default_factory=list, description="Bearer keys; empty = open.")
    max_body_bytes: int = 1024 * 1024
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    llm_timeout_s: float = 20.0

    replay_enabled: bool = Field(True, description="Verify fixes by replay in the background.")

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
