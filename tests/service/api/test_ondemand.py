"""On-demand ingest over HTTP: a traceback from a release the KB lacks, with no version
anywhere in the log, is recognised by the atlas of every release, answered at once from
the nearest release, and its stored triage is answered from that release once a child
process indexed it (its wheel is in the cache); a version the index does not list is
answered from the nearest release, saying what it would need."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import httpx
import pytest

from ingest.atlas import atlas_release
from ingest.pipeline import index_structure
from kb.atlas import ATLAS_FILE, Atlas
from kb.knowledge import KnowledgeBase
from service.settings import Settings
from tests.service.api.conftest import make_server

BASE, MISSING = "0.5.9", "0.5.12"
SA = "sglang/srt/server_args.py"


def _bare_assert(package: Path) -> tuple[int, str, str]:
    """(line, function, source line) of the first message-less assert of ``ServerArgs``
    in a release's source, found with ``ast`` (the test's own reading, not the KB's)."""
    text = (package / "srt" / "server_args.py").read_text()
    lines = text.splitlines()
    cls = next(
        n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"
    )
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Assert)
                    and node.msg is None
                    and node.lineno == node.end_lineno
                ):
                    return node.lineno, fn.name, lines[node.lineno - 1].strip()
    raise AssertionError("no single-line bare assert in ServerArgs")


@pytest.fixture(scope="module")
def small_kb(kb_settings: Settings, sglang_source, tmp_path_factory) -> Settings:
    """A KB holding only 0.5.9 (structure), in a folder of its own, and the atlas of 0.5.9
    and 0.5.12 (what ``make run`` fills in the background for every release)."""
    settings = kb_settings.model_copy(
        update={
            "kb_dir": tmp_path_factory.mktemp("ondemand"),
            "replay_enabled": False,
            "on_demand_ingest": True,
            "on_demand_embed": False,
        }
    )
    kb = KnowledgeBase(settings)
    index_structure(kb, sglang_source(BASE))
    kb.close()
    atlas = Atlas(settings.kb_path / ATLAS_FILE)
    for v in (BASE, MISSING):  # its wheel in the cache, as the "wheel cached" case
        atlas_release(atlas, v, sglang_source(v).package_dir)
    atlas.close()
    return settings


def _settled(c: httpx.Client, tid: str, polls: int = 2400) -> dict:
    """The stored triage once it no longer says ``ingesting`` (bounded by poll count)."""
    for _ in range(polls):
        rec = c.get(f"/triage/{tid}").json()
        if rec["result"]["release"]["on_demand"]["status"] != "ingesting":
            return rec
        time.sleep(0.25)
    raise AssertionError(f"triage {tid} still says ingesting")


def test_a_release_not_in_the_kb_is_answered_at_once_then_ingested_and_answered_exactly(
    small_kb: Settings, sglang_source
) -> None:
    line, function, stmt = _bare_assert(sglang_source(MISSING).package_dir)
    log = (  # no version line: the frames alone say which release this is
        "Traceback (most recent call last):\n"
        f'  File "/usr/lib/python3.11/site-packages/{SA}", line {line}, in {function}\n'
        f"    {stmt}\nAssertionError\n"
    )
    with make_server(small_kb) as srv, httpx.Client(base_url=srv.url, timeout=300) as c:
        r = c.post("/triage", content=log, headers={"content-type": "text/plain"})
        assert r.status_code == 200, r.text
        first = r.json()
        # answered at once from the release the KB holds, saying the answer will update
        assert first["release"]["release"] == BASE
        assert first["release"]["elsewhere"]["wanted"] == MISSING
        assert first["release"]["elsewhere"]["basis"] == "frames"
        assert first["release"]["on_demand"]["status"] == "ingesting"
        assert any(
            d.startswith(f"ingesting {MISSING}; this answer will update") for d in first["degraded"]
        )
        # the stored triage (GET /triage/{id}, the /t/{id} page) is the exact answer once
        # the ingest (a child process: `sglang-triage ingest --release X`) landed
        body = _settled(c, first["id"])["result"]
        rel = body["release"]
        assert rel["release"] == MISSING and rel["method"] == "on_demand"
        assert rel["on_demand"]["status"] == "ingested" and rel["on_demand"]["seconds"] > 0
        assert "separate process" in rel["on_demand"]["detail"]
        assert body["location"]["path"] == SA and body["location"]["reported_line"] == line
        assert body["location"]["citation"].startswith(f"{MISSING}:{SA}:")
        # a second log of that release needs no ingest: it is in the KB now
        again = c.post("/triage", content=log, headers={"content-type": "text/plain"}).json()
        assert "on_demand" not in again["release"] and again["release"]["release"] == MISSING
        listed = {x["version"] for x in KnowledgeBase(small_kb).store.releases()}
        assert listed == {BASE, MISSING}


def test_a_release_that_cannot_be_fetched_is_named_with_how_to_ingest_it(
    small_kb: Settings, tmp_path
) -> None:
    # a release the index does not list: refused before any pip call
    offline = small_kb.model_copy(
        update={"wheel_dir": tmp_path / "wheels", "source_dir": tmp_path / "sources"}
    )
    log = (
        "$ pip install sglang==0.5.99\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/sglang/launch_server.py", line 1, in <module>\n'
        "AssertionError\n"
    )
    with make_server(offline) as srv, httpx.Client(base_url=srv.url, timeout=300) as c:
        r = c.post("/triage", content=log, headers={"content-type": "text/plain"})
        assert r.status_code == 200, r.text
        body = r.json()
        note = body["release"]["on_demand"]
        assert note["status"] == "unavailable" and note["release"] == "0.5.99"
        assert note["how"] == "sglang-triage ingest --release 0.5.99"
        assert "not a release on the package index" in note["detail"]
        held = {x["version"] for x in KnowledgeBase(offline).store.releases()}
        assert body["release"]["release"] in held and body["release"]["method"] != "on_demand"
        assert any("0.5.99" in d and note["how"] in d for d in body["degraded"])
