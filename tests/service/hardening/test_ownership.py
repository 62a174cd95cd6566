"""Who may read and confirm a triage (issue 26): attacks on a running service, refused.

Each test runs the attack of the security review against a real uvicorn on loopback and
fails on the code before owners existed: a key reading another key's triage, ``similar``
naming other clients' ids, confirmations overwritten by anyone, and notes and fix values
stored and shown with their secrets.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from kb.records import ConfirmRefused, Records, owner_check
from service.settings import Settings

from ..api.conftest import make_server
from ..team.conftest import db_url, postgres  # noqa: F401 - fixtures

SEED = Path(__file__).resolve().parents[3] / "examples" / "seed_attempt1.log"
A, B, TEAM = "key-alice-0123456789", "key-bob-0123456789", "key-team-0123456789"
FIX = {"fix": {"remove": ["--speculative-eagle-topk"]}, "note": "worked"}


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture()
def keyed(api_settings: Settings, tmp_path: Path) -> Settings:
    """Two plain keys and a team key; records in a database of the test's own."""
    return api_settings.model_copy(
        update={
            "api_keys": [A, B],
            "team_api_keys": [TEAM],
            "database_url": f"sqlite:///{tmp_path / 'records.sqlite'}",
        }
    )


def _triage(c: httpx.Client, key: str | None = None, **headers: str) -> dict:
    r = c.post(
        "/triage?release=0.5.11",
        content=SEED.read_text(),
        headers={**(_auth(key) if key else {}), **headers},
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_a_key_reads_and_confirms_only_its_own_triages(keyed: Settings) -> None:
    with make_server(keyed) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        tid = _triage(c, A)["id"]
        assert c.get(f"/triage/{tid}", headers=_auth(A)).status_code == 200
        assert c.get(f"/triage/{tid}", headers=_auth(B)).status_code == 404  # not B's
        assert c.get(f"/triage/{tid}", headers=_auth(TEAM)).status_code == 200  # a team key
        assert c.post(f"/incidents/{tid}/confirm", json=FIX, headers=_auth(B)).status_code == 404
        assert c.post(f"/incidents/{tid}/confirm", json=FIX, headers=_auth(A)).status_code == 200
        # the team may change it; then only the team may change it again
        team_fix = {**FIX, "note": "team says"}
        assert (
            c.post(f"/incidents/{tid}/confirm", json=team_fix, headers=_auth(TEAM)).status_code
            == 200
        )
        r = c.post(f"/incidents/{tid}/confirm", json=FIX, headers=_auth(A))
        assert r.status_code == 403 and "someone else" in r.json()["detail"]
        stored = c.get(f"/triage/{tid}", headers=_auth(A)).json()
        assert stored["confirmation"]["note"] == "team says"  # the refused write changed nothing
        assert "owner" not in json.dumps(stored)  # the key's hash is not handed out


def test_similar_names_only_triages_the_caller_may_read(keyed: Settings) -> None:
    with make_server(keyed) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        mine = _triage(c, A)["id"]
        assert c.post(f"/incidents/{mine}/confirm", json=FIX, headers=_auth(A)).status_code == 200
        theirs = _triage(c, B)["similar"]
        assert theirs and all("id" not in s for s in theirs)  # B sees the fix, not A's id
        assert theirs[0]["note"] == "worked"
        again = _triage(c, A)["similar"]
        assert [s.get("id") for s in again][:1] == [mine]
        assert mine in [s.get("id") for s in _triage(c, TEAM)["similar"]]
        # /incidents: a key exports its own confirmed triages, a team key everyone's
        assert mine not in c.get("/incidents", headers=_auth(B)).text
        assert f"rec-{mine}" in c.get("/incidents", headers=_auth(A)).text
        assert f"rec-{mine}" in c.get("/incidents", headers=_auth(TEAM)).text


def test_confirmation_notes_and_fix_values_are_redacted(keyed: Settings, tmp_path: Path) -> None:
    secrets = ["sk-live1234567890abcdefXYZ", "hunter2hunter2", A]
    body = {
        "fix": {"set": {"--api-key": secrets[1], "--speculative-num-steps": 3}},
        "note": f"used token {secrets[0]} and key {secrets[2]}",
    }
    with make_server(keyed) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        tid = _triage(c, A)["id"]
        assert c.post(f"/incidents/{tid}/confirm", json=body, headers=_auth(A)).status_code == 200
        shown = [
            c.get(f"/triage/{tid}", headers=_auth(A)).text,
            json.dumps(_triage(c, B)["similar"]),
            c.get("/incidents", headers=_auth(TEAM)).text,
        ]
        later = _triage(c, A)
    for text in shown:
        assert not any(s in text for s in secrets), text[:300]
    assert later["similar"][0]["confirmed_fix"]["set"] == {
        "--api-key": "***",
        "--speculative-num-steps": 3,
    }
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("records.sqlite*"))
    assert not any(s.encode() in raw for s in secrets)


def test_on_an_open_service_no_client_overwrites_anothers_confirmation(
    api_settings: Settings, tmp_path: Path
) -> None:
    """Clients told apart by address (here forwarded by a proxy on loopback, which uvicorn
    trusts): anyone may still read and make the first confirmation, as before; only that
    client may change it."""
    open_ = api_settings.model_copy(
        update={"database_url": f"sqlite:///{tmp_path / 'records.sqlite'}"}
    )
    x, y = {"x-forwarded-for": "10.0.0.1"}, {"x-forwarded-for": "10.0.0.2"}
    with make_server(open_) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        tid = _triage(c, **x)["id"]
        assert c.get(f"/triage/{tid}", headers=y).status_code == 200  # permalinks stay open
        assert c.post(f"/incidents/{tid}/confirm", json=FIX, headers=y).status_code == 200
        r = c.post(f"/incidents/{tid}/confirm", json={**FIX, "note": "x overwrites"}, headers=x)
        assert r.status_code == 403
        assert c.get(f"/triage/{tid}").json()["confirmation"]["note"] == "worked"
        assert (
            c.post(
                f"/incidents/{tid}/confirm", json={**FIX, "note": "y again"}, headers=y
            ).status_code
            == 200
        )
        similar = _triage(c, **x)["similar"]
        assert similar and all("id" not in s for s in similar)  # open: never linked


def test_owners_on_sqlite_and_postgres(db_url: str) -> None:  # noqa: F811
    """The store's side: owners kept across a replay's re-save, the check runs before any
    write, and a pre-owner (legacy) confirmation is only replaced by a team key."""
    records = Records(db_url)
    records.save("t", {"log": "x"}, {"summary": "s"}, owner="key:a")
    records.save("t", {"log": "x"}, {"summary": "verdicts"})  # the replay's save: no owner
    assert records.owners("t") == ("key:a", False, None)
    with pytest.raises(ConfirmRefused):
        records.confirm("t", {"rank": 1}, owner="key:b", check=owner_check("key:b"))
    assert records.owners("t") == ("key:a", False, None)
    assert records.confirm("t", {"rank": 1}, owner="key:a", check=owner_check("key:a"))
    records.save("t", {"log": "x"}, {"summary": "again"})
    assert records.owners("t") == ("key:a", True, "key:a")
    records.save("legacy", {"log": "x"}, {"summary": "s"})
    assert records.confirm("legacy", {"rank": 1})  # as the code before owners wrote it
    with pytest.raises(ConfirmRefused):
        records.confirm("legacy", {"rank": 2}, owner="key:a", check=owner_check("key:a"))
    assert records.confirm(
        "legacy", {"rank": 2}, owner="key:t", check=owner_check("key:t", team=True)
    )
    with records.engine.connect() as conn:
        cols = {c["name"] for c in sa.inspect(conn).get_columns("confirmations")}
    assert "owner" not in cols  # older processes' 5-value inserts still fit
