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

import ast
import re
from typing import Any

from kb.catalogs import load_catalog
from kb.incidents import Category, Expected, ExpectedLocation, FixSpec, Incident, categorize
from kb.records import Records
from kb.store import Store


def _fix_of(fix: dict[str, Any], result: dict[str, Any]) -> tuple[FixSpec | None, str | None]:
    if fix.get("no_flag_fix"):
        return None, str(fix["no_flag_fix"])
    if "rank" in fix:
        fixes = result.get("fixes") or []
        try:
            chosen = fixes[int(fix["rank"]) - 1]
        except (ValueError, TypeError, IndexError):
            return None, None
        return FixSpec(
            set=dict(chosen.get("set") or {}), remove=list(chosen.get("remove") or [])
        ), None
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
    location = (
        ExpectedLocation(
            path=loc["path"],
            function=loc["function"],
            start_line=loc.get("start_line"),
            end_line=loc.get("end_line"),
        )
        if loc
        else None
    )
    root = engine_root_cause(result)
    parsed = result.get("parsed") or {}
    status = result.get("status")
    category: Category = (
        "argparse"
        if status == "argparse"
        else (categorize(loc["path"], loc["function"], root) if loc else "other")
    )
    tid = rec["id"]
    return Incident(
        id=f"rec-{tid}",
        source=f"recorded:{tid}",
        release=release,
        hardware=options.get("hardware") or parsed.get("hardware"),
        model=options.get("model") or parsed.get("model"),
        model_arch=options.get("model_arch") or parsed.get("model_arch"),
        command=parsed.get("command"),
        crash_log=request.get("log") or "",
        expected=Expected(
            release=release,
            location=location,
            root_cause_flags=root if status == "argparse" else _spell(root, store, release),
            acceptable_fixes=[fix] if fix else [],
            no_flag_fix=no_fix,
        ),
        category=category,
        notes=f"confirmed {conf.get('created', '')}: {conf.get('note') or ''}".strip(),
        confirmed_by=f"{conf.get('source') or 'user'}:{tid}",
    )


def export_confirmed(
    records: Records,
    store: Store | None = None,
    *,
    source: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[Incident]:
    """Every confirmed triage as an incident, oldest confirmation first (a page of the
    confirmations with ``limit``/``offset``).

    ``source`` keeps only confirmations from one front end (``"api"``,
    ``"slack"``, ``"web"``); records without a usable answer are skipped.
    """
    out: list[Incident] = []
    for rec in records.confirmed(limit=limit, offset=offset):
        if not (rec.get("request") or {}).get("log"):
            continue
        if source and ((rec.get("confirmation") or {}).get("source") or "api") != source:
            continue
        inc = incident_from_record(rec, store)
        if inc is not None:
            out.append(inc)
    return out


# ------------------------------------------------------- root cause of an answer


def _norm_text(text: str) -> str:
    return re.sub(r"\s+", "", text).replace('"', "'").replace("(", "").replace(")", "")


def _leaves(condition: str) -> list[str]:
    """The atom texts a condition splits into (operands of and/or/not), normalised."""
    try:
        node = ast.parse(condition.strip(), mode="eval").body
    except SyntaxError:
        return [_norm_text(condition)]
    out: list[str] = []

    def walk(n: ast.expr) -> None:
        if isinstance(n, ast.BoolOp):
            for v in n.values:
                walk(v)
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            walk(n.operand)
        else:
            out.append(_norm_text(ast.unparse(n)))

    walk(node)
    return out


def _group_guard_atoms(
    atoms: list[dict[str, Any]], guards: list[str]
) -> dict[int, list[dict[str, Any]]]:
    """Assign guard atoms (in order) to the guards they came from.

    Each guard's leaves are consumed in turn; an atom that is not a leaf of the
    current guard moves on to the first later guard that has it (the same text
    may appear in several guards). Atoms no guard explains stay with the current one.
    """
    pending = [_leaves(g) for g in guards]
    groups: dict[int, list[dict[str, Any]]] = {}
    pointer = 0
    for atom in atoms:
        text = _norm_text(atom.get("text") or "")
        for idx in range(pointer, len(guards)):
            if text in pending[idx]:
                pending[idx].remove(text)
                pointer = idx
                break
        groups.setdefault(pointer, []).append(atom)
    return groups


def engine_root_cause(result: dict[str, Any]) -> list[str]:
    """Root-cause attrs from a ``TriageResult`` JSON (see the module docstring)."""
    if result.get("status") == "argparse":
        flags: list[str] = []
        for fix in result.get("fixes", [])[:1]:
            flags += list(fix.get("remove") or [])
            if not flags:
                flags += list((fix.get("set") or {}).keys())
        return flags
    ev = result.get("evaluation") or {}
    every = ev.get("atoms") or []
    if every and all(isinstance(a.get("piece"), int) for a in every):
        # answers that say which piece each atom is a leaf of (every call site excluded)
        groups: dict[int, list[dict[str, Any]]] = {}
        for atom in every:
            if atom.get("role") != "call_site":
                groups.setdefault(atom["piece"], []).append(atom)
    else:  # older records: atoms matched to the guards' texts
        check = result.get("check") or {}
        guards = [g.get("condition") or "" for g in check.get("guards") or []]
        atoms = [a for a in every if a.get("role") == "guard"]
        groups = _group_guard_atoms(atoms, guards)
        tests = [a for a in every if a.get("role") == "test"]
        if tests:
            groups[len(guards)] = tests
    for idx in sorted(groups, reverse=True):
        found: list[str] = []
        for atom in groups[idx]:
            if not atom.get("failing"):
                continue
            for inp in atom.get("inputs") or []:
                if inp.get("source") == "flag" and inp.get("name") not in found:
                    found.append(inp["name"])
        if found:
            return sorted(found)
    return []


__all__ = ["engine_root_cause", "export_confirmed", "incident_from_record"]
