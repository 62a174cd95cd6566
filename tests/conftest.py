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


#: Releases the suite ingests (0.5.9 structure only; the others with embeddings).
TEST_RELEASES: dict[str, str] = {"0.5.9": "none", "0.5.11": "default", "0.5.23": "default"}


@pytest.fixture(scope="session")
def kb_settings(cache_settings: Settings) -> Settings:
    """Settings of the suite's KB.

    The KB lives in ``TRIAGE_TEST_KB`` (default ``<cache>/test-kb``), outside
    the repo, and is kept between runs: ingest is idempotent by content hash
    (which includes the extraction code), so a later run only re-checks it,
    while a fresh machine or changed extraction code re-indexes for real.
    """
    kb_dir = Path(os.environ.get("TRIAGE_TEST_KB", cache_settings.home / "test-kb"))
    return cache_settings.model_copy(update={"kb_dir": kb_dir, "chroma_url": None})


@pytest.fixture(scope="session")
def ingest_reports(kb_settings: Settings, sglang_source: Callable[[str], ReleaseSource]) -> dict:
    from sglang_triage.ingest.pipeline import ingest
    from sglang_triage.kb.base import KnowledgeBase

    kb = KnowledgeBase(kb_settings)
    reports = {v: ingest(kb, sglang_source(v), scope=scope) for v, scope in TEST_RELEASES.items()}
    kb.close()
    return reports


@pytest.fixture(scope="session")
def kb(kb_settings: Settings, ingest_reports: dict):
    """The ingested KB (0.5.9, 0.5.11, 0.5.23), shared by the whole session."""
    from sglang_triage.kb.base import KnowledgeBase

    return KnowledgeBase(kb_settings)
