"""Run the eval: every incident through the engine (in-process or over HTTP), and baselines.

``run_eval(incidents, engine_or_url)`` sends each incident the way a user would:
the crash log, the hardware profile and the model (and the model architecture
when given), plus the launch command when the log itself holds none. The
release is *not* sent: resolving it is part of what is measured (release@1).
Against a URL, ``POST {url}/triage`` gets the JSON ``{log, hardware?, model?,
model_arch?, command?}`` via httpx.

Metrics are defined in :mod:`evals.scoring`; each system (``engine``, ``grep``,
``rag``) gets per-incident scores, an aggregate (means over the incidents where
a metric applies, latency p50/p95), and the same by category and by release
(the incident's ``expected.release``; :data:`NOT_INGESTED` when it is null). The
report's models and those sums are :mod:`evals.summary`'s (re-exported here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from evals.incidents import Incident
from evals.scoring import Prediction, from_triage, score, score_robust
from evals.summary import (
    BUCKETS,
    NOT_INGESTED,
    EvalReport,
    IncidentScore,
    SystemReport,
    aggregate,
    family_variant_sections,
    release_group,
    release_order,
    reliability,
    system_report,
    variant_sections,
)
from kb.knowledge import KnowledgeBase
from kb.store import Store
from service.engine import parse_log

SYSTEMS = ("engine", "grep", "rag")


def request_for(incident: Incident) -> dict[str, Any]:
    """The JSON a user would send for ``incident`` (no release: that is measured)."""
    body: dict[str, Any] = {"log": incident.crash_log}
    for key in ("hardware", "model", "model_arch"):
        value = getattr(incident, key)
        if value:
            body[key] = value
    if incident.command:
        try:
            has_command = parse_log(incident.crash_log).command is not None
        except Exception:
            has_command = False
        if not has_command:
            body["command"] = (
                incident.command
                if isinstance(incident.command, str)
                else " ".join(incident.command)
            )
    return body


#: the key of a request body that carries, for the eval's replay judge only, the command a
#: log without one really ran (stripped before the engine is asked; HTTP targets ignore it)
REAL = "_eval_real_command"


def engine_call(engine: Any, replay: Any = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function answering a :func:`request_for` body with ``engine`` in-process (the
    answer as the API's JSON). With ``replay`` (the KB settings replay runs with), the
    answer first goes through the service's replay-backed fix search and then carries
    ``eval_replay``: replay's verdict on its recommended fix (:mod:`evals.replay_check`), and
    ``eval_engine_ms``: the engine's own time, the latency scored."""

    def call(body: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        payload = {k: v for k, v in body.items() if k in ("log", "command", "model")}
        result = engine.triage(
            payload,
            hardware=body.get("hardware"),
            model=body.get("model"),
            model_arch=body.get("model_arch"),
        )
        if replay is None:
            return result.model_dump(mode="json")
        from evals.replay_check import judge, searched

        engine_ms = (time.perf_counter() - t0) * 1000
        answer = searched(result, replay).model_dump(mode="json")
        answer["eval_replay"] = judge(answer, replay, body.get(REAL))
        answer["eval_engine_ms"] = engine_ms
        return answer

    return call


#: how often one incident is re-sent after a 429 (the service's per-client rate limit on
#: /triage), waiting the Retry-After it gives each time
_RATE_LIMIT_RETRIES = 5


def _http_call(
    url: str, timeout: float, headers: dict[str, str] | None
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    import httpx

    client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, headers=headers or {})

    def call(body: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in body.items() if k != REAL}  # the eval's own key
        resp = client.post("/triage", json=body)
        for _ in range(_RATE_LIMIT_RETRIES):  # the service's per-client rate limit: wait as told
            if resp.status_code != 429:
                break
            time.sleep(min(float(resp.headers.get("retry-after") or 1), 60.0))
            resp = client.post("/triage", json=body)
        if resp.status_code != 200:
            try:
                detail = resp.json().get("detail")
            except ValueError:
                detail = resp.text[:300]
            raise RuntimeError(f"HTTP {resp.status_code}: {str(detail)[:300]}")
        return resp.json()

    return call


def _predict_engine(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    incident: Incident,
    original: Incident | None = None,
) -> Prediction:
    """The engine's answer to ``incident``; a variant without a command line carries its
    ``original``'s command and release for replay's judge (:data:`REAL`, never sent to the
    engine: the eval's own key, judged on the command the crashed launch really ran)."""
    t0 = time.perf_counter()
    body = request_for(incident)
    if original is not None and not incident.command and original.command and original.release:
        body[REAL] = {"argv": original.command_argv(), "release": original.release}
    try:
        result = call(body)
    except Exception as exc:
        return Prediction(
            status="error",
            error=f"{type(exc).__name__}: {str(exc)[:300]}",
            root_cause=[],
            fixes=[],
            citations=[],
            latency_ms=(time.perf_counter() - t0) * 1000,
        )
    # with replay, the latency is the engine's own (the search and the judge wait for replay)
    return from_triage(
        result, result.pop("eval_engine_ms", None) or (time.perf_counter() - t0) * 1000
    )


def _describe(pred: Prediction) -> tuple[str | None, str | None]:
    loc = pred.location
    where = f"{loc.get('path')}:{loc.get('start_line')}-{loc.get('end_line')}" if loc else None
    fix = None
    if pred.fixes:
        f = pred.fixes[0]
        parts = [f"drop {r}" for r in f.get("remove") or []]
        parts += [f"{k} {v}" for k, v in (f.get("set") or {}).items()]
        fix = " ".join(parts) or None
    return where, fix


def _scores(
    incidents: list[Incident],
    preds: list[Prediction],
    store: Store | None,
    originals: dict[str, Incident] | None = None,
) -> list[IncidentScore]:
    """Scores of ``incidents``; a variant without a command line is judged against the
    command its original (in ``originals``, by id) really ran."""
    from evals.variants import SEP, variant_name

    scores: list[IncidentScore] = []
    for inc, pred in zip(incidents, preds, strict=True):
        where, fix = _describe(pred)
        base = (originals or {}).get(inc.id.split(SEP, 1)[0])
        real = base.command_argv() if base is not None and not inc.command else None
        metrics = score(inc, pred, store, real=real)
        robust, basis = score_robust(inc, pred, store, metrics, real=real)
        confidence = pred.extra.get("confidence")
        scores.append(
            IncidentScore(
                id=inc.id,
                category=inc.category,
                source=inc.source.split(":", 1)[0],
                expected_release=release_group(inc),
                status=pred.status,
                error=pred.error,
                release=pred.release,
                location=where,
                root_cause=list(pred.root_cause or []),
                top_fix=fix,
                latency_ms=round(pred.latency_ms, 2),
                metrics={**metrics, **robust},
                variant=variant_name(inc.id),
                fix_basis=basis,
                confidence=None if confidence is None else float(confidence),
                family=inc.family,
            )
        )
    return scores


def _system(
    name: str, incidents: list[Incident], preds: list[Prediction], store: Store | None
) -> SystemReport:
    return system_report(name, _scores(incidents, preds, store))


def _order(incidents: list[Incident], replay: bool) -> list[int]:
    """The order incidents are answered in (reports keep the file's order). With replay,
    grouped by release and machine: a warm replay worker serves one release on one GPU
    model (:class:`service.replay.pool.WorkerKey`), so each is started once, not once per
    switch between interleaved incidents."""
    order = list(range(len(incidents)))
    if replay:
        order.sort(key=lambda i: (incidents[i].release or "", incidents[i].hardware or ""))
    return order


def run_eval(
    incidents: list[Incident],
    engine_or_url: Any,
    *,
    kb: KnowledgeBase | None = None,
    baselines: bool = False,
    timeout: float = 120.0,
    headers: dict[str, str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    replay: Any = None,
    variants: Sequence[str] = (),
    variant_seed: int = 0,
) -> EvalReport:
    """Evaluate ``incidents`` with the engine (an ``Engine`` or a service URL).

    ``kb`` is needed for grounding checks and baselines; for an in-process engine
    it defaults to the engine's own KB. ``replay`` (KB settings; in-process only) turns
    on the replay-backed fix search and replay's verdict on each recommended fix
    (the ``fix_replay`` metric). ``variants`` (names of :data:`evals.variants.VARIANTS`)
    also answers those variants of every generated incident (``older_wording`` needs a
    local KB) and fills the report's ``variant_incidents``, ``by_variant`` and
    ``reliability``; the systems' scores stay the originals' own.
    """
    if isinstance(engine_or_url, str):
        call = _http_call(engine_or_url, timeout, headers)
        target = engine_or_url
    else:
        call = engine_call(engine_or_url, replay)
        target = "in-process" + (" with replay" if replay is not None else "")
        kb = kb or getattr(engine_or_url, "kb", None)
    store = kb.store if kb is not None else None
    extra: list[Incident] = []
    if variants:
        from evals.variants import build_variants

        extra = build_variants(incidents, variants, store=store, seed=variant_seed)
    asked = [*incidents, *extra]
    from evals.variants import SEP

    originals = {i.id: i for i in incidents} if extra else {}
    preds: dict[str, list[Prediction]] = {"engine": []}
    answers: dict[int, Prediction] = {}
    order = _order(asked, replay is not None)
    warm = None
    if replay is not None and not isinstance(engine_or_url, str):
        from evals.replay_check import Prewarmer

        warm = Prewarmer(replay, [(asked[i].release, asked[i].hardware) for i in order])
    for done, i in enumerate(order, start=1):
        if warm is not None:
            warm.before(done - 1)
        original = originals.get(asked[i].id.split(SEP, 1)[0])
        answers[i] = _predict_engine(call, asked[i], original)
        if warm is not None:
            warm.after(done - 1)
        if progress:
            progress("engine", done, len(asked))
    preds["engine"] = [answers[i] for i in range(len(incidents))]
    variant_preds = [answers[i] for i in range(len(incidents), len(asked))]
    if baselines:
        if kb is None:
            raise ValueError("baselines need a local KB (kb=...)")
        from evals.baselines import RagBaseline, grep_baseline

        preds["grep"] = [grep_baseline(kb.store, inc) for inc in incidents]
        rag = RagBaseline(kb)
        preds["rag"] = []
        for i, inc in enumerate(incidents, start=1):
            preds["rag"].append(rag.predict(inc))
            if progress:
                progress("rag", i, len(incidents))
    systems = {name: _system(name, incidents, p, store) for name, p in preds.items()}
    report = EvalReport(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        target=target,
        incidents=len(incidents),
        systems=systems,
    )
    if variants:
        report.variant_incidents = _scores(
            extra, variant_preds, store, {i.id: i for i in incidents}
        )
        report.by_variant, report.reliability = variant_sections(
            systems["engine"].incidents, report.variant_incidents
        )
        report.by_family_variant = family_variant_sections(
            systems["engine"].incidents, report.variant_incidents
        )
    return report


__all__ = [
    "BUCKETS",
    "NOT_INGESTED",
    "SYSTEMS",
    "EvalReport",
    "IncidentScore",
    "SystemReport",
    "aggregate",
    "engine_call",
    "family_variant_sections",
    "release_group",
    "release_order",
    "reliability",
    "request_for",
    "run_eval",
    "variant_sections",
]
