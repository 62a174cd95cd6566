"""The records store over a URL: the same behaviour on the embedded SQLite file and on
PostgreSQL, migrations (a pre-migration ``records.sqlite`` is stamped, then upgraded),
and several stores on one database seeing each other's writes."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

from kb.records import Records

DATA = Path(__file__).parent / "data"
HEAD = "0005"
SPEC = ("sglang/srt/server_args.py", "ServerArgs._handle_speculative_decoding")


def _result(path: str, function: str, release: str = "0.5.11") -> dict:
    return {
        "location": {"path": path, "function": function},
        "release": {"release": release},
        "summary": f"{function} refused",
        "fixes": [{"rank": 1, "command": "x"}],
    }


def test_save_get_confirm_similar_confirmed_count(db_url: str) -> None:
    records = Records(db_url)
    assert records.revision() == HEAD
    for i in range(5):
        records.save(f"t{i}", {"options": {}}, _result(*SPEC, release=f"0.5.{i}"))
    records.save("other", {"options": {}}, _result(SPEC[0], "ServerArgs.check"))
    records.save("plain", {"options": {}}, json.dumps(_result(*SPEC)))  # encoded text
    records.save("junk", {}, "not JSON at all")
    for tid in ("t0", "t1", "t3", "t4", "other"):
        assert records.confirm(tid, {"flags": {"--tp": "1"}, "id": tid}, "ok", source="slack")
    assert not records.confirm("missing", {"rank": 1})
    got = records.similar(*SPEC, exclude="t4", limit=2)
    assert [s["id"] for s in got] == ["t3", "t1"]  # ties in the second: later confirmation
    assert got[0]["confirmed_fix"] == {"flags": {"--tp": "1"}, "id": "t3"}
    assert got[0]["release"] == "0.5.3" and got[0]["note"] == "ok"
    assert records.similar("sglang/x.py", "f") == []
    assert records.get("plain")["result"] == _result(*SPEC)
    assert records.get("junk")["damaged"] == ["result"]
    assert records.get("t0")["confirmation"]["source"] == "slack"
    assert [r["id"] for r in records.confirmed()] == ["t0", "t1", "t3", "t4", "other"]
    assert [r["id"] for r in records.confirmed(limit=2, offset=1)] == ["t1", "t3"]
    assert records.count() == 8
    # replacing a triage moves it to the end and updates its location columns
    records.save("t2", {"options": {}}, _result(SPEC[0], "moved"))
    assert records.confirm("t2", {"rank": 1})
    assert [s["id"] for s in records.similar(SPEC[0], "moved")] == ["t2"]
    # a re-confirmation is the newest one
    assert records.confirm("t0", {"rank": 2})
    assert records.similar(*SPEC)[0]["id"] == "t0"


def test_damaged_rows_are_reported_not_raised(db_url: str) -> None:
    records = Records(db_url)
    records.save("deep", {}, _result(*SPEC))
    records.confirm("deep", {"rank": 1})
    deep = "1"
    for _ in range(300):
        deep = f"[{deep}]"
    with records.engine.begin() as conn:  # written by something older: no checks on the way in
        conn.execute(
            sa.text("UPDATE confirmations SET fix = :f, note = :n WHERE id = 'deep'"),
            {"f": '{"set": ' + deep + "}", "n": "fine"},
        )
    rec = records.get("deep")
    assert rec["damaged"] == ["confirmation.fix"] and rec["confirmation"]["fix"] is None
    assert records.similar(*SPEC) == []  # left out, never passed on
    records.save("nul", {"log": "a\x00b"}, {"summary": "s\x00"})  # JSON escapes NUL
    assert records.get("nul")["request"] == {"log": "a\x00b"}


def test_purge_keeps_confirmed(db_url: str) -> None:
    records = Records(db_url)
    for i in range(6):
        records.save(f"t{i}", {"log": "x"}, {"summary": str(i)})
    old = (datetime.now(timezone.utc) - timedelta(days=40)).isoformat(timespec="seconds")
    with records.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE triages SET created = :c WHERE id IN ('t0', 't1')"), {"c": old}
        )
    assert records.confirm("t0", {"rank": 1})
    assert records.purge(max_age_days=30, max_count=None) == 1
    assert records.get("t0") is not None and records.get("t1") is None
    assert records.purge(max_age_days=None, max_count=2) == 2
    assert {r for r in ("t0", "t2", "t3", "t4", "t5") if records.get(r)} == {"t0", "t4", "t5"}
    assert records.purge(max_age_days=30, max_count=None, keep_confirmed=False) == 1
    assert records.get("t0") is None and records.confirmed() == []


def test_two_stores_on_one_database_share_everything(db_url: str) -> None:
    """Two processes' stores (here two engines) see each other's writes at once, and
    concurrent writers never lose one."""
    a, b = Records(db_url), Records(db_url)
    a.save("shared", {"log": "x"}, _result(*SPEC))
    assert b.get("shared")["result"]["summary"].endswith("refused")
    assert b.confirm("shared", {"rank": 1}, "from b")
    assert a.similar(*SPEC)[0]["note"] == "from b"

    def write(store: Records, prefix: str) -> None:
        for i in range(25):
            store.save(f"{prefix}{i}", {}, {"summary": str(i)})

    threads = [threading.Thread(target=write, args=(s, p)) for s, p in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert a.count() == b.count() == 51


def test_a_records_sqlite_from_before_the_migrations_is_stamped_and_upgraded(
    tmp_path: Path,
) -> None:
    """A file the previous code wrote (``data/records_v0.sql`` is its dump: two tables,
    no ``alembic_version``) keeps every row, gains the location columns (back-filled)
    and answers ``similar`` as before."""
    path = tmp_path / "records.sqlite"
    con = sqlite3.connect(path)
    con.executescript((DATA / "records_v0.sql").read_text())
    con.close()
    records = Records(path)
    assert records.revision() == HEAD
    assert records.count() == 5
    got = records.similar(*SPEC)
    assert [s["id"] for s in got] == ["old-encoded", "old-confirmed"]
    assert got[1]["confirmed_fix"] == {"flags": {"--speculative-eagle-topk": "1"}, "rank": 1}
    assert records.get("old-confirmed")["confirmation"]["source"] == "slack"
    assert records.get("old-junk")["damaged"] == ["result"]
    con = sqlite3.connect(path)
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD,)]
    located = con.execute(
        "SELECT id FROM triages WHERE loc_function = ? ORDER BY id", (SPEC[1],)
    ).fetchall()
    con.close()
    assert located == [("old-confirmed",), ("old-encoded",)]
    # opening again is a no-op; the old code's raw 5-value insert still fits the table
    again = Records(path)
    with again.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT OR REPLACE INTO confirmations VALUES "
            "('old-other', '2026-01-01T00:00:00', '{}', 'n', 'api')"
        )
    assert [s["id"] for s in again.similar(SPEC[0], "ServerArgs.check")] == ["old-other"]


def test_not_utf8_text_is_read_with_replacement(tmp_path: Path) -> None:
    records = Records(tmp_path / "records.sqlite")
    records.save("t", {}, _result(*SPEC))
    records.confirm("t", {"rank": 1})
    con = sqlite3.connect(tmp_path / "records.sqlite")
    con.execute("UPDATE confirmations SET note = CAST(X'62616420eda080' AS TEXT)")
    con.commit()
    con.close()
    assert records.get("t")["confirmation"]["note"].startswith("bad ")


def test_kb_records_json_checks_import_without_sqlalchemy() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['sqlalchemy'] = None; "
        "from kb.records import safe_json, json_problem, new_triage_id; "
        "assert safe_json('[1]') == [1] and json_problem('\\ud800'); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
