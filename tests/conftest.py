"""Shared, session-scoped fixtures.

Real SGLang releases are downloaded from PyPI once into the wheel cache
(``TRIAGE_HOME`` or ``~/.cache/sglang-triage``) and reused across runs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from kb.sources import ReleaseSource, fetch_release
from kb.store import SCHEMA_VERSION
from service.settings import Settings


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``long_pole`` (minutes each) run first, so the pytest-xdist workers
    (``--dist loadfile``) do not wait at the end for one worker's long file; the order
    within each group is kept."""
    items.sort(key=lambda item: item.get_closest_marker("long_pole") is None)


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


#: Releases the suite ingests: 0.5.11 and 0.5.23 with embeddings, the others structure only.
#: Seven releases across the three validation layouts (0.4.x checks in ``__post_init__``
#: itself, its ``_handle_*`` steps up to 0.5.18, the resolution hooks from 0.5.19) give
#: release-range inference something to tell apart.
TEST_RELEASES: dict[str, str] = {
    "0.4.10.post2": "none",
    "0.5.5": "none",
    "0.5.9": "none",
    "0.5.11": "default",
    "0.5.16": "none",
    "0.5.21": "none",
    "0.5.23": "default",
}


@pytest.fixture(scope="session")
def kb_settings(cache_settings: Settings) -> Settings:
    """Settings of the suite's KB.

    The KB lives in ``TRIAGE_TEST_KB`` (default ``<cache>/test-kb``), outside
    the repo, and is kept between runs: ingest is idempotent by content hash
    (which includes the extraction code), so a later run only re-checks it,
    while a fresh machine or changed extraction code re-indexes for real.
    """
    kb_dir = Path(os.environ.get("TRIAGE_TEST_KB", cache_settings.home / "test-kb"))
    if _index_schema(kb_dir) > SCHEMA_VERSION:
        # the cache is shared by checkouts: one of a later schema keeps its KB, we use our own
        kb_dir = kb_dir.with_name(f"{kb_dir.name}-s{SCHEMA_VERSION}")
    # no on-demand ingest into the shared KB: the suite's answers assume exactly its releases
    # (tests/service/api/test_ondemand.py turns it on for a KB of its own)
    # no replay-backed fix search before answering either: tests of it turn it on
    # (tests/service/replay/test_search.py); the rest keep the engine's static answers
    return cache_settings.model_copy(
        update={
            "kb_dir": kb_dir,
            "chroma_url": None,
            "on_demand_ingest": False,
            "fix_search_deadline_s": 0.0,
        }
    )


def _index_schema(kb_dir: Path) -> int:
    """Schema version of ``kb_dir``'s structured index (0 when there is none yet)."""
    import sqlite3

    db = kb_dir / "index.sqlite"
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error:
        return 0
    finally:
        con.close()
    return int(row[0]) if row else 0


@pytest.fixture(scope="session")
def ingest_reports(kb_settings: Settings, sglang_source: Callable[[str], ReleaseSource]) -> dict:
    """Each test release ingested into the session KB. ``make test`` runs the suite in two
    processes (pytest-xdist) sharing this KB: the first to get here ingests, under a file
    lock, and the other then only re-checks it."""
    from filelock import FileLock

    from ingest.pipeline import ingest
    from kb.knowledge import KnowledgeBase

    kb_dir = kb_settings.kb_path
    kb_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(kb_dir.parent / f".{kb_dir.name}.lock")):
        kb = KnowledgeBase(kb_settings)
        for extra in {r["version"] for r in kb.store.releases()} - set(TEST_RELEASES):
            kb.store.delete_release(extra)  # the suite's answers assume exactly these releases
            kb.vectors.delete_release(extra)
        reports = {
            v: ingest(kb, sglang_source(v), scope=scope) for v, scope in TEST_RELEASES.items()
        }
        kb.close()
    return reports


@pytest.fixture(scope="session")
def kb(kb_settings: Settings, ingest_reports: dict):
    """The ingested KB (:data:`TEST_RELEASES`), shared by the whole session."""
    from kb.knowledge import KnowledgeBase

    return KnowledgeBase(kb_settings)


@pytest.fixture(scope="session")
def store(kb):
    return kb.store


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium through playwright, one per test process.

    Defined here, not in ``tests/service/web/conftest.py``, because tests outside that
    folder drive the page too (``tests/service/hardening/test_ondemand_bounds.py``): a
    second definition would start a second sync playwright in the same process, which
    playwright refuses ("Sync API inside the asyncio loop").

    ``make test`` installs both, so a missing one fails the run; set
    ``TRIAGE_SKIP_BROWSER=1`` to skip the browser tests on a machine without them.
    """
    from tests.service.web.conftest import CHROMIUM, CHROMIUM_ARGS

    missing = None
    try:
        from playwright import sync_api
    except ImportError:
        missing = "playwright is not installed: pip install -e '.[dev]'"
    if missing is None and not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        missing = f"{CHROMIUM} is missing: run scripts/install-browser.sh"
    if missing:
        if os.environ.get("TRIAGE_SKIP_BROWSER") == "1":
            pytest.skip(missing)
        pytest.fail(missing)
    pw = sync_api.sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    except Exception:
        pw.stop()
        raise
    yield b
    b.close()
    pw.stop()
