"""Turn confirmed triages (``<kb>/records.sqlite``) into eval incidents.

A confirmation's ``fix`` says what worked, in one of these forms:

* ``{"set": {flag: value}, "remove": [flags]}`` — the edit itself;
* ``{"rank": n}`` — the engine's n-th proposed fix (1-based);
* ``{"no_flag_fix": "upgrade" | "code bug" | reason}`` — no flag edit helped.

The triage's own location, release and root-cause flags become the expected
answer (the user confirmed the diagnosis by confirming its fix), and
``confirmed_by`` records who confirmed it.
"""

from __future__ import annotations

from typing import Any

from kb.catalogs import load_catalog
from kb.records import Records
from kb.store import Store
from kb.incidents import Expected, ExpectedLocation, FixSpec, Incident, categorize
from evals.scoring import engine_root_cause


def _fix_of(fix: dict[str, Any], result: dict[str, Any]) -> tuple[FixSpec | None, str | None]:
    if fix.get("no_flag_fix"):
        return None, str(fix["no_flag_fix"])
    if "rank" in fix:
        fixes = result.get("fixes") or []
        try:
            chosen = fixes[int(fix["rank"]) - 1]
        except (ValueError, TypeError, IndexError):
            return None, None
        return FixSpec(set=dict(chosen.get("set") or {}), remove=list(chosen.get("remove") or [])), None
    if fix.get("set") or fix.get("remove"):
        return FixSpec(set=dict(fix.get("set") or {}), remove=list(fix.get("remove") or [])), None
    return None, None


def _spell(attrs: list[str], store: Store | None, release: str | None) -> list[str]:
    if store is None or release is None or store.release(release) is None:
        return attrs
    by_attr = load_catalog(store, release).by_attr()
    return [by_attr[a].flags[0] if a in by_attr else a for a in attrs]


def incident_from_record(rec: dict[str, Any], store: Store | None = None) -> Incident | None:
    """The incident for one confirmed record (None when it holds no usable answer)."""
    conf = rec.get("confirmation")
    if not conf:
        return None
    result = rec.get("result") or {}
    request = rec.get("request") or {}
    options = request.get("options") or {}
    fix, no_fix = _fix_of(conf.get("fix") or {}, result)
    if fix is None and no_fix is None:
        return None
    release = (result.get("release") or {}).get("release")
    loc = result.get("location")
    location = ExpectedLocation(path=loc["path"], function=loc["function"],
                                start_line=loc.get("start_line"), end_line=loc.get("end_line")) \
        if loc else None
    root = engine_root_cause(result)
    parsed = result.get("parsed") or {}
    status = result.get("status")
    category = "argparse" if status == "argparse" else (
        categorize({"path": loc["path"], "function": loc["function"]}, root) if loc else "other")
    tid = rec["id"]
    return Incident(
        id=f"rec-{tid}", source=f"recorded:{tid}", release=release,
        hardware=options.get("hardware") or parsed.get("hardware"),
        model=options.get("model") or parsed.get("model"),
        model_arch=options.get("model_arch") or parsed.get("model_arch"),
        command=parsed.get("command"), crash_log=request.get("log") or "",
        expected=Expected(release=release, location=location,
                          root_cause_flags=root if status == "argparse" else _spell(root, store, release),
                          acceptable_fixes=[fix] if fix else [], no_flag_fix=no_fix),
        category=category,  # type: ignore[arg-type]
        notes=f"confirmed {conf.get('created', '')}: {conf.get('note') or ''}".strip(),
        confirmed_by=f"{conf.get('source') or 'user'}:{tid}")


def export_confirmed(records: Records, store: Store | None = None, *,
                     source: str | None = None) -> list[Incident]:
    """Every confirmed triage as an incident, oldest confirmation first.

    ``source`` keeps only confirmations from one front end (``"api"``,
    ``"slack"``, ``"web"``); records without a usable answer are skipped.
    """
    out: list[Incident] = []
    for rec in records.confirmed():
        if not (rec.get("request") or {}).get("log"):
            continue
        if source and ((rec.get("confirmation") or {}).get("source") or "api") != source:
            continue
        inc = incident_from_record(rec, store)
        if inc is not None:
            out.append(inc)
    return out


__all__ = ["export_confirmed", "incident_from_record"]
