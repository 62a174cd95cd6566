"""Durable replay jobs over a database (SQLite and PostgreSQL): one job per cache key,
claims that never hand one job to two workers, leases that bring a lost worker's job
back, bounds and fairness."""

from __future__ import annotations

import threading

import pytest

from kb.records import Records
from service.replay.jobs import JobQueue
from service.replay.queue import QueueFull

SPEC = {"release": "0.5.11", "argvs": [["--tp", "8"]], "hardware": None, "model_arch": None}


def _queue(url: str, **kw: object) -> JobQueue:
    return JobQueue(Records(url).engine, **kw)  # type: ignore[arg-type]


def test_one_job_per_key_and_every_waiting_triage_is_listed(db_url: str) -> None:
    q = _queue(db_url)
    result = {"release": {"release": "0.5.11"}, "fixes": [{"argv": ["--tp", "4"]}]}
    first = q.enqueue_triage("t1", result, ["--tp", "8"], "h100-x8", None, client="a")
    again = q.enqueue_triage("t2", result, ["--tp", "8"], "h100-x8", None, client="b")
    other = q.enqueue_triage("t3", result, ["--tp", "8"], None, None, client="a")
    assert first == again != other
    assert q.enqueue_triage("t4", {"release": {}}, ["--tp", "8"], None, None) is None
    assert q.depth() == 2
    job = q.claim("w1")
    assert job is not None and job.id == first and job.attempts == 1
    assert job.spec["argvs"] == [["--tp", "8"], ["--tp", "4"]]
    assert job.spec["hardware"] == "h100-x8"
    assert q.waiting(job) == ["t1", "t2"]
    # a triage joining the running job is told too: finish refuses until it is settled
    q.enqueue_triage("t5", result, ["--tp", "8"], "h100-x8", None)
    q.settle(job, ["t1", "t2"])
    assert not q.finish(job)
    assert q.waiting(job) == ["t5"]
    q.settle(job, ["t5"])
    assert q.finish(job)
    rows = {r["id"]: r for r in q.jobs()}
    assert rows[first]["state"] == "done" and rows[other]["state"] == "queued"
    # the same replay asked for again later is queued again (the worker's cache may answer)
    assert q.enqueue_triage("t6", result, ["--tp", "8"], "h100-x8", None) == first
    assert {r["id"]: r["state"] for r in q.jobs()}[first] == "queued"


def test_concurrent_workers_never_claim_the_same_job(db_url: str) -> None:
    q = _queue(db_url, max_pending=100, per_client=100)
    for i in range(30):
        q.submit(f"k{i}", SPEC, f"t{i}", client="c")
    claimed: list[int] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        mine = JobQueue(Records(db_url).engine)
        while (job := mine.claim(name)) is not None:
            with lock:
                claimed.append(job.id)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 30


def test_a_lost_workers_job_is_claimed_again_after_its_lease(db_url: str) -> None:
    now = [100.0]
    q = _queue(db_url, lease_s=10, max_attempts=2, clock=lambda: now[0])
    q.submit("k", SPEC, "t1")
    lost = q.claim("dead")
    assert lost is not None and q.claim("w2") is None  # leased
    now[0] += 5
    assert q.renew(lost)  # a live worker keeps it
    now[0] += 9
    assert q.claim("w2") is None
    now[0] += 2  # no renewal for the whole lease: the worker is gone
    again = q.claim("w2")
    assert again is not None and again.id == lost.id and again.attempts == 2
    assert not again.exhausted
    assert not q.renew(lost) and q.finish(lost)  # the dead worker's late finish is moot
    assert {r["state"] for r in q.jobs()} == {"running"}
    now[0] += 11
    third = q.claim("w3")
    assert third is not None and third.exhausted  # given up, its triages told so
    q.settle(third, q.waiting(third))
    assert q.finish(third, error="gave up")
    assert q.jobs()[0]["state"] == "failed" and q.jobs()[0]["error"] == "gave up"


def test_bounds_and_fair_order(db_url: str) -> None:
    q = _queue(db_url, max_pending=5, per_client=3)
    for i in range(3):
        q.submit(f"a{i}", SPEC, f"ta{i}", client="a")
    with pytest.raises(QueueFull, match="for this client"):
        q.submit("a3", SPEC, "ta3", client="a")
    q.submit("a0", SPEC, "ta0-again", client="a")  # joining a queued job is no new job
    q.submit("b0", SPEC, "tb0", client="b")
    q.submit("b1", SPEC, "tb1", client="b")
    with pytest.raises(QueueFull, match="5 jobs waiting"):
        q.submit("c0", SPEC, "tc0", client="c")
    order = []
    while (job := q.claim("w")) is not None:
        order.append(job.key)
    assert order == ["a0", "b0", "a1", "b1", "a2"]  # round-robin by client, then age


def test_a_worker_tells_every_waiting_triage_when_replay_cannot_run_here(
    db_url: str, cache_settings
) -> None:
    """A release whose wheel is not cached cannot be replayed on this host: the worker
    stores *unavailable* with the reason in each waiting triage (never leaves it pending)
    and the job is closed."""
    from service.replay.job_runner import Worker

    records = Records(db_url)
    q = JobQueue(records.engine)
    pending = {
        "release": {"release": "9.9.9"},
        "fixes": [{"argv": ["--tp", "4"]}],
        "replay": {"status": "pending"},
    }
    for tid in ("w1", "w2"):
        records.save(tid, {"log": "x"}, pending)
        q.enqueue_triage(tid, pending, ["--tp", "8"], None, None)
    worker = Worker(records, q, cache_settings, name="unit")
    assert worker.run(once=True) == 1
    for tid in ("w1", "w2"):
        stored = records.get(tid)
        assert stored["result"]["replay"]["status"] == "unavailable"
        assert stored["request"] == {"log": "x"}
    [job] = q.jobs()
    assert job["state"] == "failed" and job["error"] == stored["result"]["replay"]["detail"]
    assert worker.run(once=True) == 0  # nothing left


def test_the_api_queues_in_the_database_only_when_told(tmp_path, db_url: str) -> None:
    from service.settings import Settings
    from service.wiring import jobs_for

    base = Settings(kb_dir=tmp_path / "kb")
    assert jobs_for(base) is None  # the embedded default: replay in-process
    assert jobs_for(base.model_copy(update={"database_url": db_url})) is not None
    assert (
        jobs_for(base.model_copy(update={"database_url": db_url, "replay_queue": "process"}))
        is None
    )
    embedded = jobs_for(base.model_copy(update={"replay_queue": "database"}))
    assert embedded is not None and embedded.engine.dialect.name == "sqlite"
