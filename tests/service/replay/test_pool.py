"""The warm replay pool: same verdicts as the cold path, reused workers, isolation, bounds.

One worker (0.5.11 on rtx-pro-6000-x8) serves the whole module through the
process's pool (:func:`service.replay.pool.default_pool`), so the module pays
one cold batch, one warm start and one restart (the killed-worker test). Hostile
code runs *inside a fork* through the pool's test hook (``PoolJob.payload``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from string import Template
from typing import Any

import pytest

from kb.sources import ReleaseSource
from service.engine import get_profile
from service.replay import replay_many
from service.replay.launch import CHILD_SERVE
from service.replay.plan import substitute_argv
from service.replay.pool import PoolJob, WarmPool, WorkerKey, default_pool
from service.replay.pool.workers import machine_of
from service.replay.sandbox import status
from service.replay.trees import replay_tree
from service.settings import Settings

pytestmark = pytest.mark.skipif(not status().available, reason=status().reason)

VERSION, HW = "0.5.11", "rtx-pro-6000-x8"
DSV3, LLAMA = "DeepseekV3ForCausalLM", "LlamaForCausalLM"
PASSING = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "8"]
ASSERTS = ["--model-path", "moonshotai/Kimi-K2.5", "--tp", "8", "--speculative-algorithm", "EAGLE3",
           "--speculative-draft-model-path", "lmsys/SGLang-EAGLE3-Kimi-K2.5",
           "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]  # fmt: skip
ARGPARSE = ["--model-path", "m", "--tp", "8", "--no-such-flag"]

PROBE = r"""
import json, os, socket
report = {"uid": os.getuid(), "kb_visible": os.path.exists($kb),
          "env_has_canary": $canary in json.dumps(dict(os.environ)),
          "job_env": os.environ.get("SGLANG_POOL_TEST_VAR")}
try:
    report["parent_environ"] = $canary in open("/proc/$pid/environ").read()
except OSError as exc:
    report["parent_environ"] = type(exc).__name__
report["host_pids_visible"] = os.path.exists("/proc/$pid")
try:
    socket.create_connection(("127.0.0.1", $port), timeout=3).close()
    report["socket"] = "connected"
except OSError as exc:
    report["socket"] = type(exc).__name__
print("POOL-REPORT " + json.dumps(report), flush=True)
"""


@pytest.fixture(scope="module")
def setup(
    sglang_source: Callable[[str], ReleaseSource], cache_settings: Settings
) -> dict[str, Any]:
    root = sglang_source(VERSION).root
    tree, _ = replay_tree(
        root, VERSION, home=cache_settings.home, wheel_dir=cache_settings.wheel_dir
    )
    return {
        "root": root,
        "tree": tree,
        "hw": get_profile(HW),
        "home": cache_settings.home,
        "settings": cache_settings,
        "pool": default_pool(),
    }


def _run(
    setup: dict[str, Any], argvs: list[list[str]], archs: list[str], hardware: str = HW, **kw: Any
) -> list:
    return replay_many(
        setup["root"],
        VERSION,
        argvs,
        hardware=hardware,
        model_arch=archs,
        timeout_s=180,
        job_timeout_s=60,
        settings=setup["settings"],
        use_cache=False,
        **kw,
    )


def _assert_same(cold: list, warm: list) -> None:
    """Equal but for timings and logs, ``random_seed`` (drawn from ``random`` when not
    given: it differs between any two runs) and ``stubs_served``, which on a warm worker
    also lists the stubs its warm-up validation was served (a superset)."""
    skip = {"timings", "log_tail", "stubs_served"}
    for c, w in zip(cold, warm, strict=True):
        for r in (c, w):
            (r.server_args or {}).pop("random_seed", None)
        assert w.model_dump(exclude=skip) == c.model_dump(exclude=skip)
        assert set(c.stubs_served) <= set(w.stubs_served)
        assert w.timings["warm"] == 1.0


def _worker(setup: dict[str, Any], hw: str = HW) -> dict[str, Any]:
    stats = default_pool().stats()
    machine = machine_of(get_profile(hw))
    return next(
        w for w in stats["workers"] if w["tree"] == str(setup["tree"]) and w["machine"] == machine
    )


def _job(setup: dict[str, Any], argv: list[str], arch: str = LLAMA, **kw: Any) -> PoolJob:
    run_argv, _, _ = substitute_argv(argv, arch, setup["home"])
    assert run_argv is not None
    return PoolJob(run_argv, **kw)


def _pool_run(setup: dict[str, Any], jobs: list[PoolJob]) -> list[dict[str, Any]]:
    out = setup["pool"].run(setup["tree"], setup["hw"], setup["home"], jobs)
    assert all(r is not None for r in out)
    return out  # type: ignore[return-value]


@pytest.fixture(scope="module")
def compared(setup: dict[str, Any]) -> tuple[list, list]:
    argvs, archs = [PASSING, ASSERTS, ARGPARSE], [LLAMA, DSV3, LLAMA]
    return _run(setup, argvs, archs, pool=False), _run(setup, argvs, archs, pool=True)


def test_warm_results_equal_the_cold_path(compared: tuple[list, list]) -> None:
    cold, warm = compared
    assert [r.status for r in cold] == ["passed", "raised", "argparse_error"]
    _assert_same(cold, warm)
    for c, w in zip(cold, warm, strict=True):
        assert w.timings["warm"] == 1.0 and "pool_wait_s" in w.timings
        assert "validate_s" in w.timings and "warm" not in c.timings
    assert warm[2].usage and "usage:" in warm[2].usage


def test_a_second_candidate_reuses_the_worker(
    setup: dict[str, Any], compared: tuple[list, list]
) -> None:
    before = _worker(setup)
    [result] = _run(setup, [PASSING + ["--mem-fraction-static", "0.8"]], [LLAMA])
    after = _worker(setup)
    assert result.status == "passed" and result.timings["warm"] == 1.0
    assert result.server_args and result.server_args["mem_fraction_static"] == 0.8
    assert after["pid"] == before["pid"] and after["starts"] == before["starts"] == 1
    assert after["jobs"] == before["jobs"] + 1
    assert after["rss_mib"] > 0 and after["start_s"] > 0


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[int, list[str]]]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append("x")
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    t.join(timeout=2)
    srv.close()


def test_isolation_holds_inside_pool_forks(
    setup: dict[str, Any],
    compared: tuple[list, list],
    listener: tuple[int, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port, accepted = listener
    canary = f"xoxb-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("TRIAGE_SLACK_BOT_TOKEN", canary)  # set after the worker started
    kb_file = setup["home"] / "test-kb"
    payload = tmp_path / "probe.py"
    payload.write_text(
        Template(PROBE).substitute(
            canary=repr(canary), pid=os.getpid(), port=port, kb=repr(str(kb_file))
        )
    )
    [raw] = _pool_run(
        setup, [_job(setup, PASSING, payload=payload, env={"SGLANG_POOL_TEST_VAR": "in-the-fork"})]
    )
    line = next(ln for ln in raw["log_tail"].splitlines() if ln.startswith("POOL-REPORT "))
    report = json.loads(line.split(" ", 1)[1])
    assert report["uid"] == 65534
    assert report["kb_visible"] is False  # the service's cache is hidden
    assert report["env_has_canary"] is False
    assert report["parent_environ"] != True  # noqa: E712
    assert report["host_pids_visible"] is False  # the host's /proc is not there
    assert report["socket"] != "connected" and accepted == []  # no network
    assert report["job_env"] == "in-the-fork"  # the job's env, in its fork
    assert raw["status"] == "passed"  # validation ran after it


def test_hung_and_crashing_forks_do_not_kill_the_worker(
    setup: dict[str, Any], compared: tuple[list, list], tmp_path: Path
) -> None:
    before = _worker(setup)
    scripts = {
        "hang": "import time\ntime.sleep(600)\n",
        "exit": "import os\nos._exit(3)\n",
        "segv": "import ctypes\nctypes.string_at(0)\n",
    }
    jobs = []
    for name, text in scripts.items():
        (tmp_path / f"{name}.py").write_text(text)
        jobs.append(_job(setup, PASSING, payload=tmp_path / f"{name}.py", timeout_s=3))
    hang, exit_, segv, after_all = _pool_run(setup, [*jobs, _job(setup, PASSING)])
    assert (hang["status"], hang["phase"]) == ("harness_error", "timeout")
    assert (exit_["status"], exit_["phase"]) == ("harness_error", "crash")
    assert (segv["status"], segv["phase"]) == ("harness_error", "crash")
    assert after_all["status"] == "passed"
    after = _worker(setup)
    assert after["pid"] == before["pid"] and after["starts"] == before["starts"]


def test_deadline_marks_the_rest_unverified(
    setup: dict[str, Any], compared: tuple[list, list]
) -> None:
    results = _run(
        setup, [PASSING + ["--tp", "4"], PASSING + ["--tp", "2"]], [LLAMA, LLAMA], deadline_s=0
    )
    assert [(r.status, r.phase) for r in results] == [("harness_error", "deadline")] * 2
    assert all("unverified" in (r.harness_reason or "") for r in results)


def test_a_killed_worker_is_restarted(setup: dict[str, Any], compared: tuple[list, list]) -> None:
    before = _worker(setup)
    assert setup["pool"].kill_worker(setup["tree"], setup["hw"], setup["home"])
    time.sleep(0.5)
    [result] = _run(setup, [PASSING + ["--tp", "2"]], [LLAMA])
    assert result.status == "passed" and result.timings["warm"] == 1.0
    after = _worker(setup)
    assert after["starts"] == before["starts"] + 1 and after["pid"] != before["pid"]


# ---------------------------------------------------------------- bounds (nothing started)


def test_over_the_bound_candidates_are_unverified(setup: dict[str, Any]) -> None:
    pool = WarmPool(max_waiting=0)
    out = pool.run(setup["tree"], setup["hw"], setup["home"], [PoolJob(["--tp", "1"])] * 2)
    assert [(r or {}).get("phase") for r in out] == ["busy", "busy"]
    assert all("pool is full" in (r or {})["harness_reason"] for r in out)
    assert pool.stats()["refused"] == 2 and pool.stats()["workers"] == []


def test_lru_eviction_and_busy_workers(tmp_path: Path) -> None:
    pool = WarmPool(max_workers=1)
    hw = get_profile(HW)
    first = pool._acquire(WorkerKey.of(tmp_path / "a", hw, tmp_path), hw, None)
    assert first is not None
    # the only worker is in use: a second key waits, then gives up at its deadline
    assert (
        pool._acquire(WorkerKey.of(tmp_path / "b", hw, tmp_path), hw, time.monotonic() + 0.3)
        is None
    )
    first.users -= 1  # released: now the least recently used idle worker is evicted
    second = pool._acquire(WorkerKey.of(tmp_path / "b", hw, tmp_path), hw, None)
    assert second is not None and second is not first and first.retired
    assert [w["tree"] for w in pool.stats()["workers"]] == [str(tmp_path / "b")]
    pool.close()
    assert second.retired


def test_idle_workers_are_stopped(tmp_path: Path) -> None:
    pool = WarmPool(idle_timeout_s=0.5)
    hw = get_profile(HW)
    worker = pool._acquire(WorkerKey.of(tmp_path / "a", hw, tmp_path), hw, None)
    assert worker is not None
    worker.users -= 1
    for _ in range(50):
        if not pool.stats()["workers"]:
            break
        time.sleep(0.1)
    assert pool.stats()["workers"] == [] and worker.retired
    pool.close()


def test_warm_equals_cold_on_0_5_23(
    sglang_source: Callable[[str], ReleaseSource], cache_settings: Settings
) -> None:
    """0.5.23's resolution pipeline imports lazily; after answering its first jobs the worker
    imports what their forks imported (``_preimport`` in ``child/serve.py``), so later forks start
    with it: the verdicts must not change."""
    root = sglang_source("0.5.23").root
    argvs, archs = [PASSING, ASSERTS, ARGPARSE], [LLAMA, DSV3, LLAMA]

    def run(warm: bool) -> list:
        return replay_many(
            root,
            "0.5.23",
            argvs,
            hardware=HW,
            model_arch=archs,
            timeout_s=180,
            job_timeout_s=60,
            settings=cache_settings,
            use_cache=False,
            pool=warm,
        )

    cold, warm = run(False), run(True)
    assert [r.status for r in cold] == ["passed", "raised", "argparse_error"]
    _assert_same(cold, warm)
    assert warm[-1].timings["preimport_s"] > 0  # the worker learnt from a first job


def test_a_worker_serves_one_gpu_model_at_any_count(
    setup: dict[str, Any], compared: tuple[list, list]
) -> None:
    """The worker set up for rtx-pro-6000-x8 answers a job on two of the same GPU exactly as
    a cold replay on that machine does (the count and the probes that follow from it are
    applied in the fork): the final ServerArgs and the probe disagreements included."""
    other = "rtx-pro-6000-x2"
    argvs, archs = [PASSING, ASSERTS], [LLAMA, DSV3]
    _run(setup, argvs[:1], archs[:1], pool=True)  # the setup's worker is up
    before = _worker(setup)
    cold = _run(setup, argvs, archs, hardware=other, pool=False)
    warm = _run(setup, argvs, archs, hardware=other, pool=True)
    _assert_same(cold, warm)
    after = _worker(setup)
    assert after["pid"] == before["pid"] and after["started_with"] == HW
    assert after["jobs"] == before["jobs"] + len(argvs)


def test_another_gpu_model_gets_its_own_worker(
    setup: dict[str, Any], compared: tuple[list, list]
) -> None:
    """SGLang reads the GPU while importing (module constants, GPU-name checks), so a job on
    another GPU model is not served by a worker imported for this one: it gets a worker set
    up for its own machine, whose answers equal a cold replay's there."""
    other = "b200-x8"
    argvs, archs = [PASSING, ASSERTS], [LLAMA, DSV3]
    cold = _run(setup, argvs, archs, hardware=other, pool=False)
    warm = _run(setup, argvs, archs, hardware=other, pool=True)
    _assert_same(cold, warm)
    worker = _worker(setup, other)
    assert worker["started_with"] == other and worker["machine"] != machine_of(setup["hw"])


def test_a_count_read_at_import_sends_the_job_cold() -> None:
    """When the release read a fact at import that a job's machine changes (here the GPU
    count, through ``torch.cuda.device_count``), the worker answers ``machine_bound``;
    facts nobody read at import, and the profile's name, never bind."""
    script = CHILD_SERVE  # a sandbox script: ``import runner`` needs its folder on the path
    spec = importlib.util.spec_from_file_location("child_serve_for_test", script)
    assert spec is not None and spec.loader is not None
    sys.path.insert(0, str(script.parent))
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(script.parent))
    x8 = {"name": "rtx-pro-6000-x8", "gpu": "G", "count": 8, "memory_mib": 98304}
    x2 = {**x8, "name": "rtx-pro-6000-x2", "count": 2}
    assert mod.bound_at_import(x2, x8, {}, {}, {"capability", "name"}) == []
    assert mod.bound_at_import(x2, x8, {}, {}, {"count"}) == [
        "count (read at import through count)"
    ]
    assert mod.bound_at_import({**x8, "name": "other"}, x8, {}, {}, {"count", "memory"}) == []
    assert mod.bound_at_import(
        x8, x8, {"get_device_sm": 100}, {"get_device_sm": 120}, {"get_device_sm"}
    ) == ["get_device_sm (called at import)"]


def test_a_worker_stopped_while_its_start_reads_lets_go(tmp_path: Path) -> None:
    """A start that an eviction or the idle reaper retires stops reading before its pipe is
    closed: the descriptor number, once free, may be the next worker's pipe, and a reader
    left on it would take that worker's first line and leave its start waiting forever."""
    import subprocess

    from service.replay.pool.workers import WarmWorker

    hw = get_profile(HW)
    worker = WarmWorker(WorkerKey.of(tmp_path / "a", hw, tmp_path), hw, start_timeout_s=600)
    marker = f"pool-test-{uuid.uuid4().hex}"
    # a grandchild in its own session keeps the pipe open after the worker is killed, as
    # a sandbox's processes may for a moment: the reader cannot count on an end of file
    spawn = (
        "import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(600)', os.environ['HOLDER']], start_new_session=True); "
        "time.sleep(600)"
    )
    worker.proc = subprocess.Popen(
        [sys.executable, "-c", spawn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "HOLDER": marker},
    )
    stdout = worker.proc.stdout
    assert stdout is not None

    def holders() -> list[int]:
        found = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            with contextlib.suppress(OSError):
                if marker in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    found.append(int(pid))
        return found

    while not holders():
        time.sleep(0.05)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            worker._read_line(time.monotonic() + 600)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while worker._io.acquire(blocking=False):  # until the reader holds the pipe
        worker._io.release()
        time.sleep(0.01)
    worker.stop(retire=True)  # returns once the reader let go of the pipe
    reader.join(timeout=60)
    assert not reader.is_alive()
    for pid in holders():
        os.kill(pid, signal.SIGKILL)
    assert len(outcome) == 1 and "stopped" in str(outcome[0]), outcome
    assert stdout.closed and worker.proc is None
