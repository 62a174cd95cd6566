"""On-demand ingest within bounds, against a real ``sglang-triage serve`` process and a real
package index on loopback (a PEP 503 folder served by ``http.server``; pip downloads from it).

The index lists 0.5.5 (in the KB), 0.5.9 (a real wheel, not in the KB) and 0.5.6–0.5.8
(files that are not wheels: pip fetches them and the ingest fails, cheaply). Every fetch is
counted where it happens: the index server logs each GET with its User-Agent (pip's for a
download, httpx's for the release list), and nothing here is mocked. Budgets, the disk quota,
dev builds, the list's TTL and the failure memory are also checked in process (same children).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ingest.pipeline import index_structure
from kb.knowledge import KnowledgeBase
from kb.sources import ReleaseSource
from service import ondemand
from service.settings import Settings
from tests.service.api.conftest import free_port

BASE, REAL = "0.5.5", "0.5.9"
BROKEN = ("0.5.6", "0.5.7", "0.5.8")


@dataclass
class FakeIndex:
    """A simple index on loopback, with every request it served."""

    url: str
    folder: Path
    hits: list[tuple[str, str]] = field(default_factory=list)  # (path, user agent)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wheel_gets(self, version: str | None = None) -> int:
        """Downloads of a distribution file (of ``version``, or of any)."""
        with self.lock:
            return sum(
                1
                for path, _ in self.hits
                if path.endswith(".whl") and (version is None or f"sglang-{version}-" in path)
            )

    def listings(self) -> int:
        """Project pages asked for by the service (not by pip)."""
        with self.lock:
            return sum(
                1
                for path, agent in self.hits
                if path.rstrip("/").endswith("/sglang") and not agent.startswith("pip/")
            )


@pytest.fixture(scope="module")
def index(
    sglang_source: Callable[[str], ReleaseSource],
    cache_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FakeIndex]:
    sglang_source(REAL)  # the real wheel, in the shared cache
    folder = tmp_path_factory.mktemp("index")
    project = folder / "simple" / "sglang"
    project.mkdir(parents=True)
    names = []
    for version in (BASE, REAL):
        wheel = next(cache_settings.wheel_dir.glob(f"sglang-{version}-*.whl"))
        shutil.copy(wheel, project / wheel.name)
        names.append(wheel.name)
    for version in BROKEN:
        name = f"sglang-{version}-py3-none-any.whl"
        (project / name).write_bytes(b"not a wheel\n" * 100)
        names.append(name)
    (project / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n"
        + "".join(f'<a href="{n}">{n}</a><br/>\n' for n in names)
        + "</body></html>\n"
    )
    served = FakeIndex("", folder)

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            with served.lock:
                served.hits.append((self.path, self.headers.get("User-Agent", "")))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(folder)))
    served.url = f"http://127.0.0.1:{httpd.server_address[1]}/simple"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield served
    httpd.shutdown()


@pytest.fixture(scope="module")
def base_kb(
    sglang_source: Callable[[str], ReleaseSource],
    tmp_path_factory: pytest.TempPathFactory,
    cache_settings: Settings,
) -> Path:
    """A KB folder holding only 0.5.5's structure (copied by each test that changes it)."""
    folder = tmp_path_factory.mktemp("base-kb")
    kb = KnowledgeBase(cache_settings.model_copy(update={"kb_dir": folder}))
    index_structure(kb, sglang_source(BASE))
    kb.store.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    kb.close()
    return folder


def _settings(tmp: Path, base_kb: Path, index: FakeIndex, **update: object) -> Settings:
    """Settings of a fresh home (empty wheel and source caches) with a copy of the base KB."""
    shutil.copytree(base_kb, tmp / "kb")
    return Settings(
        home=tmp / "home",
        kb_dir=tmp / "kb",
        pip_index_url=index.url,
        releases=[BASE],
        replay_enabled=False,
        fix_search_deadline_s=0.0,
        on_demand_embed=False,
        **update,
    )


def _pip_env() -> dict[str, str]:
    """pip reads only the loopback index (no config file, extra index or find-links)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "TRIAGE_"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "HF_HUB_OFFLINE": "1"}


def _log(version: str) -> str:
    return (
        f"$ pip install sglang=={version}\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/sglang/launch_server.py", line 1, '
        "in <module>\nAssertionError\n"
    )


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


@dataclass
class Serve:
    url: str
    settings: Settings
    proc: subprocess.Popen[bytes]
    errlog: Path


@contextlib.contextmanager
def _serving(tmp: Path, base_kb: Path, index: FakeIndex, **env_update: str) -> Iterator[Serve]:
    """``sglang-triage serve`` (one worker, 40 threads) on a copy of the base KB."""
    settings = _settings(tmp, base_kb, index)
    port = free_port()
    env = {
        **_pip_env(),
        "TRIAGE_HOME": str(settings.home),
        "TRIAGE_KB_DIR": str(settings.kb_path),
        "TRIAGE_PIP_INDEX_URL": index.url,
        "TRIAGE_RELEASES": json.dumps([BASE]),
        "TRIAGE_REPLAY_ENABLED": "false",
        "TRIAGE_FIX_SEARCH_DEADLINE_S": "0",
        "TRIAGE_ON_DEMAND_EMBED": "false",
        "TRIAGE_API_KEYS": "[]",
        "TRIAGE_TRIAGE_RATE_PER_MINUTE": "0",  # bursts are these tests' point
        "TRIAGE_ON_DEMAND_PER_CLIENT_PER_HOUR": "10",
        **env_update,
    }
    errlog = tmp / "serve.err"
    with errlog.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None, errlog.read_text()[-3000:]
                time.sleep(0.2)
        yield Serve(url, settings, proc, errlog)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def serve(
    index: FakeIndex,
    base_kb: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Serve]:
    """One server for the tests that each name releases of their own."""
    with _serving(tmp_path_factory.mktemp("serve"), base_kb, index) as srv:
        yield srv


def _post(url: str, log: str) -> httpx.Response:
    return httpx.post(
        f"{url}/triage", content=log, timeout=120, headers={"content-type": "text/plain"}
    )


def _post_all(url: str, logs: list[str]) -> list[httpx.Response]:
    """POST every log at once (one connection each)."""
    with concurrent.futures.ThreadPoolExecutor(len(logs)) as pool:
        return list(pool.map(partial(_post, url), logs))


def _ingest_children(version: str, kb_dir: Path) -> list[int]:
    """Pids of running ``sglang-triage ingest --release <version>`` processes into ``kb_dir``."""
    found = []
    mark = f"TRIAGE_KB_DIR={kb_dir}".encode()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not (b"ingest" in argv and version.encode() in argv and b"--release" in argv):
                continue
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _rss(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _settled(url: str, tid: str, polls: int = 2400) -> dict:
    """The stored triage once it no longer says ``ingesting`` (bounded by poll count)."""
    for _ in range(polls):
        rec = httpx.get(f"{url}/triage/{tid}", timeout=30).json()
        if rec["result"]["release"]["on_demand"]["status"] != "ingesting":
            return rec
        time.sleep(0.25)
    raise AssertionError(f"triage {tid} still says ingesting")


def test_forty_unlisted_versions_fetch_nothing_and_healthz_answers(
    serve: Serve, index: FakeIndex
) -> None:
    caches = serve.settings.wheel_dir, serve.settings.source_dir
    before = [_tree_bytes(p) for p in caches]
    wheels = index.wheel_gets()
    versions = [f"0.{minor}.{patch}" for minor in (6, 7, 8, 9) for patch in range(10)]
    with concurrent.futures.ThreadPoolExecutor(len(versions)) as pool:
        futures = [pool.submit(_post, serve.url, _log(v)) for v in versions]
        health = httpx.get(f"{serve.url}/healthz", timeout=30)  # while the burst is served
        responses = [f.result() for f in futures]
    assert health.status_code == 200
    for version, r in zip(versions, responses, strict=True):
        assert r.status_code == 200, r.text
        note = r.json()["release"]["on_demand"]
        assert note["release"] == version and note["status"] == "unavailable"
        assert "not a release on the package index" in note["detail"]
        assert "nothing was fetched" in note["detail"] and "the nearest is" in note["detail"]
        assert r.json()["release"]["release"] == BASE  # answered from the release the KB has
    assert index.wheel_gets() == wheels  # no pip download at all
    assert index.listings() == 1  # the release list, once for the whole burst (TTL: an hour)
    assert [_tree_bytes(p) for p in caches] == before  # nothing unpacked or downloaded
    assert {r["version"] for r in KnowledgeBase(serve.settings).store.releases()} == {BASE}


def test_concurrent_requests_for_one_release_fetch_it_once_and_are_answered_at_once(
    serve: Serve, index: FakeIndex
) -> None:
    n = 39  # with the server's 40 threads: one ingest must not take them all
    rss_before = _rss(serve.proc.pid)
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(_post, serve.url, _log(REAL)) for _ in range(n)]
        for _ in range(6000):  # until the ingest's child process shows
            if _ingest_children(REAL, serve.settings.kb_path):
                break
            time.sleep(0.05)
        running = _ingest_children(REAL, serve.settings.kb_path)
        health = httpx.get(f"{serve.url}/healthz", timeout=10)
        still_running = set(_ingest_children(REAL, serve.settings.kb_path)) & set(running)
        responses = [f.result() for f in futures]
    assert running and health.status_code == 200
    assert still_running  # /healthz answered while that very ingest process ran
    ids = []
    for r in responses:
        assert r.status_code == 200, r.text
        body = r.json()
        note = body["release"]["on_demand"]
        # "ingesting" is said only while the ingest is in flight: answered before it finished
        assert note["status"] == "ingesting" and note["release"] == REAL
        assert body["release"]["release"] == BASE
        assert any(
            d.startswith(f"ingesting {REAL}; this answer will update") for d in body["degraded"]
        )
        ids.append(body["id"])
    # the web page polls the stored triage; it is re-triaged when the ingest lands
    peak = {"child": 0}
    stop = threading.Event()

    def sample() -> None:  # the ingest's memory is the child's
        while not stop.is_set():
            for pid in _ingest_children(REAL, serve.settings.kb_path):
                with contextlib.suppress(OSError, AssertionError):  # it just ended
                    peak["child"] = max(peak["child"], _rss(pid))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    records = [_settled(serve.url, tid) for tid in ids]
    stop.set()
    sampler.join()
    for rec in records:
        rel = rec["result"]["release"]
        assert rel["on_demand"]["status"] == "ingested", rel["on_demand"]
        assert rel["release"] == REAL and rel["method"] == "on_demand"
    assert index.wheel_gets(REAL) == 1  # one download for all 39
    # the ingest's memory went with the child; the server only holds what answering from the
    # new release needs (measured: +73 MB from a cold start, 94 -> 166 MB; the child's own
    # process peaked at 128 MB, its parse workers not counted)
    grown = _rss(serve.proc.pid) - rss_before
    print(f"server RSS +{grown / 1e6:.0f} MB, ingest child peak {peak['child'] / 1e6:.0f} MB")
    assert grown < 400e6
    held = {r["version"] for r in KnowledgeBase(serve.settings).store.releases()}
    assert held == {BASE, REAL}
    again = httpx.post(
        f"{serve.url}/triage",
        content=_log(REAL),
        timeout=60,
        headers={"content-type": "text/plain"},
    ).json()
    assert again["release"]["release"] == REAL and "on_demand" not in again["release"]
    assert index.wheel_gets(REAL) == 1


def test_a_failed_release_is_not_fetched_again_within_the_window(
    serve: Serve, index: FakeIndex
) -> None:
    broken = BROKEN[0]
    gets = index.wheel_gets(broken)
    first = _post_all(serve.url, [_log(broken)] * 5)
    assert {r.json()["release"]["on_demand"]["status"] for r in first} == {"ingesting"}
    settled = [_settled(serve.url, r.json()["id"]) for r in first]
    for rec in settled:  # the requests that were waiting learn the failure, once
        note = rec["result"]["release"]["on_demand"]
        assert note["status"] == "unavailable" and note["detail"].startswith(
            f"could not fetch or index {broken}"
        )
    later = _post_all(serve.url, [_log(broken)] * 5)
    for r in later:
        note = r.json()["release"]["on_demand"]
        assert note["status"] == "unavailable"
        assert note["detail"] == settled[0]["result"]["release"]["on_demand"]["detail"]
    assert index.wheel_gets(broken) - gets == 1  # pip ran once for the ten requests


def test_the_page_polls_while_the_release_is_ingested_and_shows_the_new_answer(
    serve: Serve, index: FakeIndex, browser: object
) -> None:
    version = BROKEN[1]  # fetched, then refused by the ingest: cheap, and an answer changes
    gets = index.wheel_gets(version)
    ctx = browser.new_context(base_url=serve.url)  # type: ignore[attr-defined]
    ctx.add_init_script("window.__triagePollScale = 0.5;")  # polls every 1-30 s
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto("/")
        page.wait_for_selector("html[data-ready='true']")
        page.fill("#log", _log(version))
        page.click("#submit")
        page.wait_for_selector("#summary-text", timeout=120_000)
        assert f"ingesting {version}; this answer will update" in page.inner_text("#result")
        assert "/t/" in page.url  # the permalink whose stored triage is updated
        page.wait_for_function(
            "(v) => document.getElementById('result').textContent"
            ".includes(`the log names ${v}, which is not in the KB (could not fetch or index`)",
            arg=version,
            timeout=300_000,
        )
        assert f"ingesting {version}" not in page.inner_text("#result")
        assert errors == []
    finally:
        ctx.close()
    assert index.wheel_gets(version) - gets == 1


def test_over_http_the_next_new_release_over_the_clients_budget_is_refused(
    tmp_path: Path, base_kb: Path, index: FakeIndex
) -> None:
    gets = index.wheel_gets(BROKEN[2])
    with _serving(tmp_path, base_kb, index, TRIAGE_ON_DEMAND_PER_CLIENT_PER_HOUR="2") as srv:
        first = [_post(srv.url, _log(v)).json() for v in BROKEN[:2]]
        assert [b["release"]["on_demand"]["status"] for b in first] == ["ingesting"] * 2
        r = _post(srv.url, _log(BROKEN[2]))
        assert r.status_code == 200, r.text  # a note in the answer, not an error
        body = r.json()
        note = body["release"]["on_demand"]
        assert note["status"] == "refused" and note["release"] == BROKEN[2]
        assert (
            "this client had 2 new releases ingested on demand in the last hour" in note["detail"]
            and "TRIAGE_ON_DEMAND_PER_CLIENT_PER_HOUR" in note["detail"]
        )
        assert body["release"]["release"] == BASE
        assert any(BROKEN[2] in d and note["how"] in d for d in body["degraded"])
        # joining an ingest under way costs nothing: the same releases are still answered
        again = _post(srv.url, _log(BROKEN[0])).json()["release"]["on_demand"]["status"]
        assert again in ("ingesting", "unavailable")  # under way, or failed meanwhile
        for b in first:  # let both (failing) ingests end before the server stops
            _settled(srv.url, b["id"])
    assert index.wheel_gets(BROKEN[2]) == gets  # the refused one was never fetched


# ------------------------------------------------------------- in process: budgets, quota


def test_the_next_new_release_over_a_clients_hourly_budget_is_refused(
    tmp_path: Path, base_kb: Path, index: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    settings = _settings(
        tmp_path, base_kb, index, on_demand_per_client_per_hour=2, on_demand_global_per_hour=3
    )
    ingester = ondemand.OnDemandIngest(KnowledgeBase(settings))
    first = [ingester.ensure(v, settings, client="10.0.0.1") for v in BROKEN[:2]]
    assert [n.status for n in first] == ["ingesting", "ingesting"]
    third = ingester.ensure(BROKEN[2], settings, client="10.0.0.1")
    assert third.status == "refused"
    assert "TRIAGE_ON_DEMAND_PER_CLIENT_PER_HOUR" in third.detail and "last hour" in third.detail
    # another client still has its own budget, until the global one is spent
    other = ingester.ensure(BROKEN[2], settings, client="10.0.0.2")
    assert other.status == "ingesting"
    fourth = ingester.ensure(REAL, settings, client="10.0.0.3")
    assert fourth.status == "refused" and "TRIAGE_ON_DEMAND_GLOBAL_PER_HOUR" in fourth.detail
    for version in BROKEN:  # let the three (failing) ingests finish
        assert ingester.ensure(version, settings, client="x", wait=True).status == "unavailable"
    assert ingester.fetches == 3  # child ingests started: the refused ones started none


def _fake_on_demand_release(settings: Settings, kb: KnowledgeBase, version: str, size: int) -> None:
    """An on-demand release with its cached wheel and unpacked source taking ``size`` bytes."""
    from ingest.acquire.quota import record_on_demand

    kb.store.replace_release(
        version, {"version": version, "origin": "pypi:test", "status": "indexed", "files": 0}, {}
    )
    record_on_demand(kb, version)
    settings.wheel_dir.mkdir(parents=True, exist_ok=True)
    (settings.wheel_dir / f"sglang-{version}-py3-none-any.whl").write_bytes(b"w" * (size // 2))
    (settings.source_dir / version / "sglang").mkdir(parents=True)
    (settings.source_dir / version / "sglang" / "x.py").write_bytes(b"s" * (size // 2))


def test_the_disk_quota_evicts_an_on_demand_release_never_a_default(
    tmp_path: Path, base_kb: Path, index: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest.acquire.quota import disk_usage, on_demand_releases

    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    settings = _settings(tmp_path, base_kb, index)
    kb = KnowledgeBase(settings)
    size = 4_000_000
    _fake_on_demand_release(settings, kb, "0.5.7", size)
    usage = disk_usage(settings)
    # quota: over it now, under it once 0.5.7 (not the default 0.5.5) is gone
    fits = settings.model_copy(update={"disk_quota_gb": (usage - size // 2) / 1e9})
    note = ondemand.OnDemandIngest(kb).ensure(BROKEN[2], fits, client="a", wait=True)
    assert "evicted 0.5.7" in note.detail  # then the ingest ran (and failed: not a wheel)
    assert note.status == "unavailable" and index.wheel_gets(BROKEN[2]) >= 1
    held = {r["version"] for r in kb.store.releases()}
    assert held == {BASE} and on_demand_releases(kb) == {}
    assert (
        not list(settings.wheel_dir.glob("sglang-0.5.7-*"))
        and not (settings.source_dir / "0.5.7").exists()
    )
    # a quota the default release alone exceeds: nothing left to evict, refused, no fetch
    _fake_on_demand_release(settings, kb, "0.5.6", size)
    tiny = settings.model_copy(update={"disk_quota_gb": 1e-6})
    gets = index.wheel_gets()
    refused = ondemand.OnDemandIngest(kb).ensure(REAL, tiny, client="b", wait=True)
    assert refused.status == "refused" and "TRIAGE_DISK_QUOTA_GB" in refused.detail
    assert "evicted 0.5.6" in refused.detail and "not ingested" in refused.detail
    assert {r["version"] for r in kb.store.releases()} == {BASE}  # the default stays
    assert index.wheel_gets() == gets


def test_the_release_list_is_read_once_per_ttl_and_shared_through_its_file(
    tmp_path: Path, index: FakeIndex
) -> None:
    from ingest.acquire.release_list import ReleaseList

    cache = tmp_path / "releases.json"
    before = index.listings()
    releases = ReleaseList(index.url, ttl_s=3600, cache_file=cache)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        seen = list(pool.map(lambda _: releases.offered().versions, range(40)))
    assert all(v == frozenset({BASE, REAL, *BROKEN}) for v in seen)
    assert index.listings() - before == 1 and releases.fetches == 1
    # another process (a restarted server) reuses the file while it is fresh
    assert ReleaseList(index.url, ttl_s=3600, cache_file=cache).offered().versions == seen[0]
    assert index.listings() - before == 1
    # past the TTL it is read again
    ReleaseList(index.url, ttl_s=0, cache_file=cache).offered()
    assert index.listings() - before == 2


def test_the_failure_memory_is_bounded(tmp_path: Path, base_kb: Path, index: FakeIndex) -> None:
    settings = _settings(tmp_path, base_kb, index)
    ingester = ondemand.OnDemandIngest(KnowledgeBase(settings))
    with ingester._lock:
        for i in range(ondemand.FAILED_MAX + 50):
            ingester._remember_failure(f"0.0.{i}", f"failure {i}")
        assert len(ingester._failed) == ondemand.FAILED_MAX
        assert ingester._failure("0.0.0") is None  # the oldest went first
        last = ondemand.FAILED_MAX + 49
        assert ingester._failure(f"0.0.{last}") == f"failure {last}"


def test_dev_builds_go_to_git_only_when_configured_and_within_the_budgets(
    tmp_path: Path, base_kb: Path, index: FakeIndex
) -> None:
    dev, other = "0.5.19.dev410+gedff717ef", "0.5.19.dev411+gabcdef123"
    settings = _settings(tmp_path, base_kb, index, on_demand_per_client_per_hour=1)
    ingester = ondemand.OnDemandIngest(KnowledgeBase(settings))
    no_git = ingester.ensure(dev, settings, client="a")
    assert no_git.status == "unavailable" and "TRIAGE_SGLANG_GIT is not set" in no_git.detail
    assert ingester.fetches == 0
    repo = tmp_path / "sglang.git"  # a git remote without that commit: the child's fetch fails
    subprocess.run(["git", "init", "--bare", "--quiet", str(repo)], check=True)
    with_git = settings.model_copy(update={"sglang_git": str(repo)})
    assert ingester.ensure(dev, with_git, client="a").status == "ingesting"
    over = ingester.ensure(other, with_git, client="a")  # the same budget as any release
    assert over.status == "refused" and "TRIAGE_ON_DEMAND_PER_CLIENT_PER_HOUR" in over.detail
    failed = ingester.ensure(dev, with_git, client="b", wait=True)
    assert failed.status == "unavailable" and "edff717ef" in failed.detail
    assert ingester.fetches == 1
