"""The Slack bot's state over a database: two instances on one URL (two processes) share
event ids, thread contexts and rate limits; the in-memory default behaves the same within
one process. Parametrized over SQLite and PostgreSQL."""

from __future__ import annotations

import threading

from kb.records import Records
from service.engine import TriageResult
from service.slack.shared import DbSeen, DbThreadStore, DbTokenBucket, slack_state
from service.slack.state import Seen, ThreadContext, ThreadStore, TokenBucket


def _result() -> TriageResult:
    return TriageResult.model_validate(
        {
            "status": "located",
            "summary": "bare AssertionError",
            "explanation": "why",
            "confidence": 0.9,
            "release": {"release": "0.5.11"},
            "parsed": {"exception": "AssertionError", "command": ["--tp", "8"]},
            "fixes": [],
            "replay": {"status": "pending"},
        }
    )


def test_seen_is_shared_and_expires(db_url: str) -> None:
    now = [1000.0]
    a = DbSeen(Records(db_url).engine, "event", ttl_s=60, clock=lambda: now[0])
    b = DbSeen(Records(db_url).engine, "event", ttl_s=60, clock=lambda: now[0])
    other = DbSeen(a.engine, "message", ttl_s=60, clock=lambda: now[0])
    assert a.add("Ev1") and not b.add("Ev1") and not a.add("Ev1")
    assert other.add("Ev1")  # namespaces are apart
    now[0] += 61
    assert b.add("Ev1")  # expired: a new delivery


def test_only_one_of_many_concurrent_deliveries_wins(db_url: str) -> None:
    stores = [DbSeen(Records(db_url).engine, "event") for _ in range(2)]
    wins: list[bool] = []
    lock = threading.Lock()

    def deliver(seen: DbSeen) -> None:
        for i in range(20):
            ok = seen.add(f"Ev{i}")
            with lock:
                wins.append(ok)

    threads = [threading.Thread(target=deliver, args=(s,)) for s in stores * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 20


def test_thread_context_round_trips_between_processes(db_url: str) -> None:
    a, b = DbThreadStore(Records(db_url).engine), DbThreadStore(Records(db_url).engine)
    assert b.get("C1", "1.0") is None and b.get("C1", None) is None
    ctx = ThreadContext(
        "C1", "1.0", "the log", {"release": "0.5.11", "hardware": None}, "tid1", _result()
    )
    a.put(ctx)
    got = b.get("C1", "1.0")
    assert got is not None and got.tid == "tid1" and got.payload == "the log"
    assert got.options == {"release": "0.5.11", "hardware": None}
    assert got.result == ctx.result
    a.put(ThreadContext("C1", "1.0", "the log", {"hardware": "h100-x8"}, "tid2", _result()))
    assert b.get("C1", "1.0").tid == "tid2"


def test_thread_store_keeps_the_newest_and_drops_expired(db_url: str) -> None:
    now = [0.0]
    store = DbThreadStore(Records(db_url).engine, max_items=3, ttl_s=100, clock=lambda: now[0])
    for i in range(70):  # prunes every 64 puts
        now[0] = float(i)
        store.put(ThreadContext("C", f"{i}.0", "p", {}, f"t{i}", _result()))
    assert store.get("C", "69.0") is not None and store.get("C", "66.0") is not None
    assert store.get("C", "10.0") is None
    now[0] = 1000.0
    assert store.get("C", "69.0") is None  # older than the ttl


def test_token_bucket_is_one_bucket_for_every_process(db_url: str) -> None:
    now = [500.0]
    a = DbTokenBucket(Records(db_url).engine, rate=1.0, burst=3, clock=lambda: now[0])
    b = DbTokenBucket(Records(db_url).engine, rate=1.0, burst=3, clock=lambda: now[0])
    assert [a.try_take("C"), b.try_take("C"), a.try_take("C")] == [0.0, 0.0, 0.0]
    assert b.try_take("C") == 1.0 and a.try_take("other") == 0.0
    now[0] += 1.0
    assert b.try_take("C") == 0.0 and a.try_take("C") > 0


def test_state_is_in_memory_without_a_database(db_url: str) -> None:
    mem = slack_state(None)
    assert type(mem.events) is Seen and type(mem.threads) is ThreadStore
    assert type(mem.bucket) is TokenBucket
    shared = slack_state(Records(db_url).engine)
    assert isinstance(shared.events, DbSeen) and isinstance(shared.threads, DbThreadStore)
    assert shared.events.add("x") and not shared.events.add("x") and shared.messages.add("x")
    assert shared.signatures.ttl_s == 360
