"""Score one prediction against an incident's expected answer.

A :class:`Prediction` is what any system under evaluation said (the engine's
``TriageResult`` JSON through :func:`from_triage`, or a baseline). The metrics,
each None where it does not apply:

``release_at_1``  the resolved release equals ``expected.release`` (scored when set)
``exact_location`` same release, path, start and end line (scored when the expected
                  location has lines)
``function_match`` same path and function name (scored when a location is expected)

A frameless log that several releases reproduce identically has several right
answers: ``expected.equivalents`` (each confirmed by replay, :mod:`evals.equivalents`)
lists the other (release, check) pairs, and the three metrics above also count an
answer equal to one of them (function match: the equivalent's path and function, for
an answer naming that release). Flags and fixes are compared as before, with the
primary release's catalog and acceptable fixes: replay holds every acceptable fix on each
equivalent release too, and the shipped equivalents' flags are spelled alike in both.
``rc_precision`` / ``rc_recall``  root-cause flags, compared as attributes. The
                  engine's root-cause flags are the user-set flags (input source
                  ``flag``) read by failing atoms of the innermost piece of the path
                  condition that has any: the assert's test, else the innermost guard,
                  then outwards; call-site guards never count. (For an argparse error:
                  the flags the top fix removes or renames.) Precision is scored when
                  something is predicted, recall when something is expected.
``fix_valid``     the top fix verifies: ``fixes_check`` true, no trips, and no rule
                  verdict ``violated`` with severity ``error`` but for ``background`` ones
                  (violated by ``--model-path`` alone too, as the engine's recommendation
                  rule treats them) (scored when a flag fix
                  is expected, or one was proposed)
``fix_match``     one of the top three fixes equals an acceptable fix (same flags
                  removed, same values set, spellings compared as attributes; or the
                  same resulting command once parsed; :mod:`evals.fix_match`) — scored when acceptable
                  fixes exist
``no_fix_declined`` no verified fix is proposed (scored when ``expected.no_flag_fix``)
``grounded``      every citation resolves to an existing line of an ingested release
``fix_replay``    the recommended fix passes the release's own validation on replay
                  (:mod:`evals.replay_check`; an answer recommending none fails it) —
                  scored when a flag fix is expected and replay could decide
``no_fix``        the answer recommends no fix (a share: lower is better) — scored when a
                  flag fix is expected and the answer located the check or argparse error
``keeps_features`` no replay-accepted fix of the incident gives up a strict subset of
                  the user's feature flags the recommended fix gives up (issue #28's
                  measure, :mod:`evals.keeps`; the answer's own flag when there is no
                  command to compare) — scored when a fix is recommended
``keeps_all_features`` the recommended fix keeps every feature flag the user set, with
                  its value (``FixOut.keeps_features``) — scored when a fix is recommended
``upgrade_said``  the answer leads with a sure upgrade (``upgrade_fix.sure``), to the
                  release ``expected.no_flag_fix`` names when it names one ("upgrade to
                  ≥ 0.5.23") — scored when ``expected.no_flag_fix`` starts with "upgrade"
``not_flag_said`` the answer says "not a launch-flag problem" (``not_flag_problem``) —
                  scored when ``expected.no_flag_fix`` starts with "not a"

Two summary metrics (:data:`ROBUST_METRICS`) say per answer whether it is right, for the
variants of issue #28 (:mod:`evals.variants`) and the reliability table:

``location_ok``   the exact location (primary or an equivalent), or — for an answer whose
                  release *range* (``release.range.releases``, a log without deciding
                  frames) holds the expected release — the same check in the release it
                  answered from: same exception type and message template (whitespace,
                  wrapping and the argument object's root aside; a bare assert or a short
                  message: same function and condition too), however its guards changed;
                  without expected lines, the function match (scored when a location is
                  expected)
``fix_ok``        with a flag fix expected: replay's verdict on the recommended fix when
                  replay decided (``fix_basis`` ``replay``), else the recommended fix equals
                  an acceptable fix (``static``); with ``expected.no_flag_fix``: upgrade said,
                  not-a-flag-problem said, or (another reason) no verified fix proposed by an
                  answer whose location is right

A variant that does not carry the command line (frameless) is scored against the command
the crashed launch really ran (its original's): with replay, the recommended fix's edits are
applied to that command and replayed on the original's release (:mod:`evals.replay_check`);
statically, a fix is right when, applied to that command, it is an acceptable edit of it
(setting a flag to the value it had is no edit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from evals.fix_match import fix_matches, flag_attr
from evals.incidents import Incident
from evals.keeps import keeps_features
from kb.catalog_types import Catalog
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.recording import engine_root_cause
from kb.store import Store
from kb.versions import sorted_versions

METRICS: tuple[str, ...] = (
    "release_at_1",
    "exact_location",
    "function_match",
    "rc_precision",
    "rc_recall",
    "fix_valid",
    "fix_match",
    "no_fix_declined",
    "grounded",
    "fix_replay",
    "no_fix",
    "keeps_features",
    "keeps_all_features",
    "upgrade_said",
    "not_flag_said",
)
#: metrics that are shares of a bad outcome: an incident misses them when they are True
LOWER_IS_BETTER = frozenset({"no_fix"})


def missed(metric: str, value: bool | float | None) -> bool:
    """Did an incident miss ``metric`` with this ``value``? (None: not scored, no miss.)"""
    if metric in LOWER_IS_BETTER:
        return value is True or (isinstance(value, float) and value > 0.0)
    return value is False or (isinstance(value, float) and value < 1.0)


#: per-answer correctness for variants and the reliability table (see the module docstring)
ROBUST_METRICS: tuple[str, ...] = ("location_ok", "fix_ok")

_UPGRADE_TO = re.compile(r"≥\s*v?([0-9][0-9A-Za-z.+-]*[0-9A-Za-z])")
_CITE = re.compile(r"^(?P<rel>[^:]+):(?P<path>[^:]+):(?P<start>\d+)(?:-(?P<end>\d+))?$")


@dataclass
class Prediction:
    """What a system said about one incident (fields it does not produce stay None)."""

    status: str = "unlocated"
    release: str | None = None
    location: dict[str, Any] | None = None  # path, function, start_line, end_line
    root_cause: list[str] | None = None  # flag spellings or attrs
    fixes: list[dict[str, Any]] | None = None  # set, remove, argv?, fixes_check?, trips?
    verified_fixes: bool = True  # False: fixes carry no verification (fix_valid N/A)
    resolves_release: bool = True  # False: the release was given (release@1 N/A)
    citations: list[str] | None = None
    error: str | None = None
    latency_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ engine results


def from_triage(result: dict[str, Any], latency_ms: float = 0.0) -> Prediction:
    """A :class:`Prediction` from a ``TriageResult`` (as JSON)."""
    loc = result.get("location")
    citations = list(result.get("citations") or [])
    if loc and loc.get("citation"):
        citations.append(loc["citation"])
    citations += [r["citation"] for r in result.get("references") or [] if r.get("citation")]
    fixes = [
        {
            "set": f.get("set") or {},
            "remove": f.get("remove") or [],
            "argv": f.get("argv"),
            "fixes_check": f.get("fixes_check"),
            "trips": f.get("trips") or [],
            "rule_verdicts": f.get("rule_verdicts") or [],
            "recommended": bool(f.get("recommended")),
            "keeps_features": f.get("keeps_features"),
            "replay_ok": (f.get("replay") or {}).get("status") == "verified",
        }
        for f in result.get("fixes") or []
    ]
    rel = result.get("release") or {}
    return Prediction(
        status=result.get("status", "unlocated"),
        release=(result.get("release") or {}).get("release"),
        location={k: loc.get(k) for k in ("path", "function", "start_line", "end_line")}
        if loc
        else None,
        root_cause=engine_root_cause(result),
        fixes=fixes,
        citations=citations,
        latency_ms=latency_ms,
        extra={
            "confidence": result.get("confidence"),
            "range": list((rel.get("range") or {}).get("releases") or []),
            **({"replay": result["eval_replay"]} if result.get("eval_replay") else {}),
            **({"upgrade": result["upgrade_fix"]} if result.get("upgrade_fix") else {}),
            **({"not_flag": result["not_flag_problem"]} if result.get("not_flag_problem") else {}),
        },
    )


# ------------------------------------------------------------------------ scoring


def grounded(store: Store, citations: list[str]) -> bool | None:
    """Every citation names an existing line of an ingested release (None: no citations)."""
    if not citations:
        return None
    for cite in citations:
        m = _CITE.match(cite.strip())
        if m is None or store.release(m["rel"]) is None:
            return False
        first = int(m["start"])
        last = int(m["end"] or first)
        if (
            not store.file_lines(m["rel"], m["path"], first, first)
            or not store.file_lines(m["rel"], m["path"], last, last)
            or last < first
        ):
            return False
    return True


def catalog_for(store: Store | None, release: str | None) -> Catalog | None:
    if store is None:
        return None
    rels = [r["version"] for r in store.releases()]
    version = release if release in rels else (sorted_versions(rels)[-1] if rels else None)
    if version is None:
        return None
    try:
        return load_catalog(store, version)
    except Exception:
        return None


def right_answers(incident: Incident) -> list[tuple[str | None, Any]]:
    """``(release, location)`` of every right answer: the primary, then each equivalent
    (an object with ``path``, ``function``, ``start_line``, ``end_line``)."""
    exp = incident.expected
    out: list[tuple[str | None, Any]] = [(exp.release, exp.location)]
    return out + [(e.release, e) for e in getattr(exp, "equivalents", None) or []]


def _same_function(loc: dict[str, Any] | None, want: Any) -> bool:
    return (
        bool(loc)
        and loc.get("path") == want.path
        and str(loc.get("function") or "").rsplit(".", 1)[-1] == want.function.rsplit(".", 1)[-1]
    )


def score(
    incident: Incident, pred: Prediction, store: Store | None, *, real: list[str] | None = None
) -> dict[str, Any]:
    """Per-incident metrics (None where a metric does not apply); ``real``: the command the
    launch really ran when the incident (a variant) does not carry it (:func:`fix_matches`)."""
    exp = incident.expected
    answers = right_answers(incident)
    others = answers[1:]
    catalog = catalog_for(store, exp.release or pred.release)
    out: dict[str, Any] = dict.fromkeys(METRICS)
    if exp.release is not None and pred.resolves_release:
        out["release_at_1"] = pred.release in {r for r, _ in answers}
    loc = pred.location
    if exp.location is not None:
        out["function_match"] = _same_function(loc, exp.location) or any(
            r == pred.release and _same_function(loc, e) for r, e in others
        )
        if exp.location.start_line is not None and exp.release is not None:
            out["exact_location"] = any(
                r == pred.release
                and _same_function(loc, e)
                and loc is not None
                and (loc.get("start_line"), loc.get("end_line")) == (e.start_line, e.end_line)
                for r, e in answers
            )
    if pred.root_cause is not None:
        want = {flag_attr(f, catalog) for f in exp.root_cause_flags}
        got = {flag_attr(f, catalog) for f in pred.root_cause}
        if got:
            out["rc_precision"] = len(got & want) / len(got)
        if want:
            out["rc_recall"] = len(got & want) / len(want)
    if pred.fixes is not None:
        top = pred.fixes[0] if pred.fixes else None
        if pred.verified_fixes and (exp.no_flag_fix is None or top is not None):
            out["fix_valid"] = (
                bool(top)
                and top.get("fixes_check") == "true"
                and not top.get("trips")
                and not any(
                    rv.get("verdict") == "violated"
                    and rv.get("severity") == "error"
                    and not rv.get("background")
                    for rv in top.get("rule_verdicts") or []
                )
            )
        if exp.acceptable_fixes:
            command = incident.command_argv()
            out["fix_match"] = any(
                fix_matches(f, a, command, catalog, real=real)
                for f in pred.fixes[:3]
                for a in exp.acceptable_fixes
            )
        if exp.no_flag_fix is not None:
            out["no_fix_declined"] = not any(
                f.get("fixes_check") in ("true", None) for f in pred.fixes
            )
    if exp.no_flag_fix is not None and exp.no_flag_fix.startswith("upgrade"):
        up = pred.extra.get("upgrade") or {}
        named = _UPGRADE_TO.search(exp.no_flag_fix)
        out["upgrade_said"] = bool(up.get("sure")) and (
            named is None or up.get("release") == named.group(1)
        )
    if exp.no_flag_fix is not None and exp.no_flag_fix.startswith("not a"):
        out["not_flag_said"] = bool(pred.extra.get("not_flag"))
    if store is not None and pred.citations is not None:
        out["grounded"] = grounded(store, pred.citations)
    _score_intent(exp, pred, out)
    if out["keeps_features"] is not None and pred.fixes:
        out["keeps_all_features"] = out["keeps_features"]
        measured = keeps_features(
            incident.command_argv(), pred.fixes, exp.acceptable_fixes, catalog
        )
        if measured is not None:
            out["keeps_features"] = measured
    return out


def _score_intent(exp: Any, pred: Prediction, out: dict[str, Any]) -> None:
    """``fix_replay``, ``no_fix`` and ``keeps_features`` (see the module docstring)."""
    if pred.fixes is None or not pred.verified_fixes:
        return
    recommended = next((f for f in pred.fixes if f.get("recommended")), None)
    fix_expected = exp.no_flag_fix is None
    if fix_expected and pred.status in ("located", "argparse"):
        out["no_fix"] = recommended is None
    verdict = (pred.extra.get("replay") or {}).get("fix_replay")
    if fix_expected and verdict is not None:
        out["fix_replay"] = verdict == "passed"
    if recommended is not None and recommended.get("keeps_features") is not None:
        out["keeps_features"] = bool(recommended["keeps_features"])


def _check_at(store: Store | None, release: str | None, loc: Any) -> Check | None:
    """The KB's check of ``release`` at ``loc`` (a dict or an object with path, function,
    start_line)."""
    if store is None or release is None or loc is None:
        return None
    get = loc.get if isinstance(loc, dict) else lambda k: getattr(loc, k, None)
    if get("start_line") is None:
        return None
    rows = store.checks(release, path=get("path"))
    return next((c for c in rows if c.start_line == get("start_line")), None)


def same_check(
    store: Store | None,
    release_a: str | None,
    loc_a: Any,
    release_b: str | None,
    loc_b: Any,
) -> bool:
    """Is the check at ``loc_a`` of ``release_a`` the one at ``loc_b`` of ``release_b``:
    the same exception and message template (:func:`evals.variants.same_message_check`)?"""
    from evals.variants import same_message_check

    a = _check_at(store, release_a, loc_a)
    b = _check_at(store, release_b, loc_b)
    return a is not None and b is not None and same_message_check(a, b)


def score_robust(
    incident: Incident,
    pred: Prediction,
    store: Store | None,
    metrics: dict[str, Any],
    *,
    real: list[str] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """``location_ok`` and ``fix_ok`` (module docstring) from the other ``metrics`` of the
    answer, and the basis of ``fix_ok`` (``replay``, ``static``, ``no_flag``)."""
    exp = incident.expected
    out: dict[str, Any] = dict.fromkeys(ROBUST_METRICS)
    if exp.location is not None:
        if metrics.get("exact_location") is not None:
            ok = bool(metrics["exact_location"])
            rng = pred.extra.get("range") or []
            if not ok and exp.release in rng and pred.release in rng and pred.location:
                ok = same_check(store, pred.release, pred.location, exp.release, exp.location)
            out["location_ok"] = ok
        else:
            out["location_ok"] = bool(metrics.get("function_match"))
    basis: str | None = None
    if pred.fixes is None or not pred.verified_fixes:
        return out, basis
    if exp.no_flag_fix is None:
        verdict = (pred.extra.get("replay") or {}).get("fix_replay")
        if verdict is not None:
            out["fix_ok"], basis = verdict == "passed", "replay"
        elif exp.acceptable_fixes:
            top = next((f for f in pred.fixes if f.get("recommended")), None)
            catalog = catalog_for(store, exp.release or pred.release)
            out["fix_ok"] = top is not None and any(
                fix_matches(top, a, incident.command_argv(), catalog, real=real)
                for a in exp.acceptable_fixes
            )
            basis = "static"
        return out, basis
    basis = "no_flag"
    if exp.no_flag_fix.startswith("upgrade"):
        out["fix_ok"] = bool(metrics.get("upgrade_said"))
    elif exp.no_flag_fix.startswith("not a"):
        out["fix_ok"] = bool(metrics.get("not_flag_said"))
    else:  # declining is right only for an answer that found the check (not an unlocated one)
        out["fix_ok"] = bool(metrics.get("no_fix_declined")) and out["location_ok"] is not False
    return out, basis


__all__ = [
    "METRICS",
    "ROBUST_METRICS",
    "Prediction",
    "engine_root_cause",
    "fix_matches",
    "from_triage",
    "grounded",
    "right_answers",
    "same_check",
    "score",
    "score_robust",
]
