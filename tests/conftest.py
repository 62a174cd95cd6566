"""Shared, session-scoped fixtures.

Real SGLang releases are downloaded from PyPI once into the wheel cache
(``TRIAGE_HOME`` or ``~/.cache/sglang-triage``) and reused across runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from sglang_triage.config import Settings  # noqa: E402
from sglang_triage.ingest.acquire import ReleaseSource, fetch_release  # noqa: E402


@pytest.fixture(scope="session")
def cache_settings() -> Settings:
    """Settings pointing at the shared wheel/source cache (never the repo)."""
    return Settings()


@pytest.fixture(scope="session")
def sglang_source(cache_settings: Settings) -> Callable[[str], ReleaseSource]:
    """``sglang_source("0.5.11")`` -> the unpacked release (downloaded once, then cached)."""
    cache: dict[str, ReleaseSource] = {}

    def get(version: str) -> ReleaseSource:
        if version not in cache:
            cache[version] = fetch_release(
                version,
                wheel_dir=cache_settings.wheel_dir,
                source_dir=cache_settings.source_dir,
                index_url=cache_settings.pip_index_url,
            )
        return cache[version]

    return get


@pytest.fixture(scope="session")
def source_root() -> Callable[[ReleaseSource], Path]:
    return lambda src: src.package_dir
