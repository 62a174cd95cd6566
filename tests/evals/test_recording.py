"""Confirmed triages exported as eval incidents."""

from __future__ import annotations

from evals.incidents import INCIDENTS_DIR, dump_incidents, load_incidents
from evals.runner import run_eval
from kb.recording import export_confirmed
from kb.records import Records, new_triage_id
from service.engine.triage import Engine


def _save(records: Records, engine: Engine, log: str, options: dict) -> str:
    result = engine.triage(log, **options)
    tid = new_triage_id()
    records.save(tid, {"options": options, "log": log}, result.model_dump(mode="json"))
    return tid


def test_export_confirmed(kb, tmp_path) -> None:
    seed = {i.id: i for i in load_incidents([INCIDENTS_DIR / "seed.jsonl"])}
    engine = Engine(kb)
    records = Records(tmp_path / "records.sqlite")
    opts = {"release": None, "hardware": "rtx-pro-6000-x8", "model": None, "model_arch": None}
    t1 = _save(records, engine, seed["seed-attempt-2"].crash_log, opts)
    t2 = _save(records, engine, seed["seed-attempt-1"].crash_log, {**opts, "hardware": None})
    t3 = _save(
        records,
        engine,
        "$ python -m sglang.launch_server --model-path /m/x --tp 2 "
        "--reasoning_parser kimi_k2\nlaunch_server.py: error: unrecognized arguments: "
        "--reasoning_parser kimi_k2\n",
        opts,
    )
    # the user confirms the fix that drops the draft size (not the engine's first: that one
    # adds the missing companion flags)
    drop = next(
        f["rank"]
        for f in records.get(t1)["result"]["fixes"]
        if f["remove"] == ["--speculative-num-draft-tokens"] and not f["set"]
    )
    assert records.confirm(t1, {"rank": drop}, note="worked")
    assert records.confirm(t2, {"no_flag_fix": "upgrade"})
    assert not records.confirm("nope", {"rank": 1})
    incidents = {i.id: i for i in export_confirmed(records, kb.store)}
    assert set(incidents) == {f"rec-{t1}", f"rec-{t2}"}  # t3 was never confirmed
    one = incidents[f"rec-{t1}"]
    assert one.source == f"recorded:{t1}" and one.confirmed_by == f"api:{t1}"
    assert one.expected.release == "0.5.11" and one.category == "speculative"
    assert (one.expected.location.start_line, one.expected.location.end_line) == (3519, 3522)
    assert one.expected.root_cause_flags == ["--speculative-num-draft-tokens"]
    assert one.expected.acceptable_fixes[0].remove == ["--speculative-num-draft-tokens"]
    assert one.hardware == "rtx-pro-6000-x8" and one.command and "worked" in one.notes
    two = incidents[f"rec-{t2}"]
    assert two.expected.no_flag_fix == "upgrade" and not two.expected.acceptable_fixes
    # the exported file is a valid incident file, and the engine agrees with itself on it
    path = dump_incidents(incidents.values(), tmp_path / "recorded.jsonl")
    report = run_eval(load_incidents([path]), engine)
    scores = {s.id: s.metrics for s in report.engine.incidents}
    assert scores[f"rec-{t1}"]["fix_match"] is True
    assert scores[f"rec-{t1}"]["exact_location"] is True
    assert scores[f"rec-{t2}"]["no_fix_declined"] is False  # the engine did propose a fix
    assert t3


def test_export_by_source_and_cli(kb, kb_settings, tmp_path, monkeypatch) -> None:
    """Slack confirmations export on their own; the CLI writes the same JSONL."""
    from typer.testing import CliRunner

    from service.cli.main import app

    seed = {i.id: i for i in load_incidents([INCIDENTS_DIR / "seed.jsonl"])}
    engine = Engine(kb)
    home = tmp_path / "kb"
    records = Records(home / "records.sqlite")
    opts = {"release": None, "hardware": "rtx-pro-6000-x8", "model": None, "model_arch": None}
    t_api = _save(records, engine, seed["seed-attempt-2"].crash_log, opts)
    t_slack = _save(records, engine, seed["seed-attempt-1"].crash_log, opts)
    assert records.confirm(t_api, {"rank": 1})
    assert records.confirm(t_slack, {"rank": 2}, note="confirmed in Slack by U1", source="slack")
    slack = export_confirmed(records, kb.store, source="slack")
    assert [i.id for i in slack] == [f"rec-{t_slack}"]
    assert slack[0].confirmed_by == f"slack:{t_slack}"
    assert {i.id for i in export_confirmed(records, kb.store)} == {f"rec-{t_api}", f"rec-{t_slack}"}

    # the CLI reads the records of TRIAGE_KB_DIR
    import sqlite3

    src = sqlite3.connect(kb_settings.kb_path / "index.sqlite")
    dst = sqlite3.connect(home / "index.sqlite")
    src.backup(dst)
    src.close()
    dst.close()
    monkeypatch.setenv("TRIAGE_KB_DIR", str(home))
    out = tmp_path / "slack.jsonl"
    res = CliRunner().invoke(app, ["export-incidents", "--source", "slack", "--out", str(out)])
    assert res.exit_code == 0, res.output
    exported = load_incidents([out])
    assert [i.model_dump() for i in exported] == [i.model_dump() for i in slack]
    res = CliRunner().invoke(app, ["export-incidents"])
    assert res.exit_code == 0 and res.stdout.count("\n") == 2
