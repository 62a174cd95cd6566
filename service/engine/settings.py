"""What the engine reads from the environment beyond the KB's settings: the optional LLM.

:class:`EngineSettings` extends :class:`kb.settings.KBSettings` (prefix ``TRIAGE_``);
:class:`service.settings.Settings` extends it with the front ends' settings.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from kb.settings import KBSettings

__all__ = ["EngineSettings"]


class EngineSettings(KBSettings):
    """The KB's settings plus the OpenAI-compatible endpoint that may write explanations."""

    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = Field(
        None, description="API key of the LLM endpoint (secret; never in repr, logs or dumps)."
    )
    llm_timeout_s: float = 20.0
