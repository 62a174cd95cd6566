"""Check a launch command against the rule cards of one release.

``check(flags, release, facts, store=...)`` gives one
:class:`~sglang_triage.service.models.RuleVerdict` per card whose ``releases``
range contains ``release``:

* ``violated``       ``when`` is true and ``require`` is false;
* ``satisfied``      ``require`` is true (then ``when`` does not matter);
* ``not_applicable`` ``when`` is false;
* ``unknown``        anything else; the reason names the unknown inputs.

The attribute environment is the release's own: defaults from its flag catalog
(:func:`~sglang_triage.service.evaluation.base_attrs`), then the user's flags
parsed with that catalog (:func:`~sglang_triage.service.flags.parse_argv`).
For a *derived* card, the writes that run before its check in that release
(``NEXTN`` -> ``EAGLE``, a default chosen from others) are folded in first with
:func:`~sglang_triage.service.evaluation.apply_earlier_writes`, exactly as the
engine does for the check itself; curated cards speak about the flags as given.

Speed: each card's verdict is memoised on the values of everything it depends
on (the attributes its conditions read, plus those read by the guards and
values of the writes folded in for it) and on the facts. The first check of a
release evaluates every card once; later checks (another command, a fix
candidate) re-evaluate only the cards whose inputs changed, which is how the
engine can afford a rule check on every fix.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import threading
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import UnsafeExpression
from ..ingest.catalog import Catalog
from ..kb.catalogs import load_catalog
from ..kb.store import Store
from ..service import chain
from ..service.evaluation import apply_earlier_writes, base_attrs
from ..service.expr import (
    UNKNOWN,
    Env,
    Provenance,
    Result,
    Value,
    evaluate,
    fact_key,
)
from ..service.facts import fact_values, get_profile, model_arch_for
from ..service.flags import ParsedArgs, ParsedFlag, parse_argv
from ..service.models import RuleVerdict, jsonable
from .cards import Card, helper_reads, load_curated
from .derive import derivation_key, derive_cards, derived_sources, qualifying_checks

__all__ = ["CardResult", "Verdict", "baseline_violations", "cards_for", "check", "check_fix",
           "evaluate_cards", "facts_for", "prepare_flags"]

Verdict = Literal["violated", "satisfied", "unknown", "not_applicable"]

_lock = threading.Lock()
_memo: dict[tuple[Any, ...], CardResult] = {}
_MEMO_MAX = 200_000
_releases_cache: dict[tuple[Any, ...], list[Card]] = {}
_baselines: dict[tuple[Any, ...], frozenset[str]] = {}


@dataclass
class CardResult:
    """A card's verdict with the evaluations behind it."""

    card: Card
    verdict: Verdict
    reason: str
    unknowns: list[str] = field(default_factory=list)
    inputs: list[tuple[str, object, str]] = field(default_factory=list)  # name, value, detail
    notes: list[str] = field(default_factory=list)

    def as_rule_verdict(self) -> RuleVerdict:
        return RuleVerdict(rule=self.card.id, verdict=self.verdict, severity=self.card.severity,
                           reason=self.reason)


# --------------------------------------------------------------------------- facts


def facts_for(hardware: str | None = None, model_arch: str | None = None,
              model: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, Value]:
    """Facts as the engine builds them: a hardware profile name, an architecture
    (guessed from ``model`` when not given) and environment variables."""
    hw = get_profile(hardware) if hardware else None
    arch = model_arch or model_arch_for(model)
    facts = dict(fact_values(hw, arch, env, model=model))
    if arch:
        key = fact_key("self.get_model_config().hf_config.architectures")
        facts.setdefault(key, Value([arch], Provenance("fact", f"model architecture {arch}")))
    return facts


def _facts_sig(facts: Mapping[str, Any]) -> str:
    items = sorted((k, repr(v.value if isinstance(v, Value) else v)) for k, v in facts.items())
    return hashlib.sha1(repr(items).encode()).hexdigest()


# -------------------------------------------------------------------------- helpers
# Pure summaries of 0.5.2x helpers that derived conditions call (runtime_context.py,
# arg_groups/model_override_base.py). They receive the argument view and read attributes
# through it, so every read is recorded as an input.


def _attn_dp_enabled_of(cfg: Any) -> object:
    size = cfg.attn_dp_size
    if size is UNKNOWN or not isinstance(size, int):
        return UNKNOWN
    if size > 1:
        return True
    mode = cfg.ep_join_mode  # ep_scale_joiner_of: a scale joiner runs DP-attention paths
    return UNKNOWN if mode is UNKNOWN else mode == "scale"


def _num_dp_ranks_of(cfg: Any) -> object:
    dp, attn = cfg.dp_size, cfg.attn_dp_size
    if not isinstance(dp, int) or not isinstance(attn, int):
        return UNKNOWN
    return dp * attn


def _attention_backends_of(cfg: Any) -> object:
    base = cfg.attention_backend
    pre, dec = cfg.prefill_attention_backend, cfg.decode_attention_backend
    if UNKNOWN in (pre, dec) or ((not pre or not dec) and base is UNKNOWN):
        return UNKNOWN
    return (pre or base, dec or base)


_HELPERS = {"attn_dp_enabled_of": _attn_dp_enabled_of, "num_dp_ranks_of": _num_dp_ranks_of,
            "attention_backends_of": _attention_backends_of}


# ----------------------------------------------------------------------- the cards


def cards_for(store: Store, release: str) -> list[Card]:
    """Curated and derived cards whose range contains ``release`` (cached)."""
    curated = load_curated()
    key = (str(store.path), derivation_key(store)[0], release, id(curated[0]) if curated else 0,
           len(curated))
    with _lock:
        hit = _releases_cache.get(key)
    if hit is not None:
        return hit
    cards = [c for c in [*curated, *derive_cards(store)] if c.applies_to(release)]
    with _lock:
        if len(_releases_cache) > 64:
            _releases_cache.clear()
        _releases_cache[key] = cards
    return cards


def _check_rows(store: Store, release: str) -> dict[tuple[str, int], dict[str, Any]]:
    return chain.cached(chain.release_key(store, release, "rules:check_rows"), lambda: {
        (r["path"], r["start_line"]): r for r in qualifying_checks(store, release)})


def _release_meta(store: Store, release: str) -> dict[str, tuple[Card, Any, tuple[str, ...]]]:
    """card id -> (card, source check row or None, dependencies): filled lazily, per release."""
    return chain.cached(chain.release_key(store, release, "rules:meta"), dict)


def _meta(store: Store, release: str, card: Card) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """(the check a derived card comes from in ``release`` if writes matter, dependencies).

    Dependencies are the attributes the card reads, those its helpers read and,
    for a derived card, those read by the guards and values of the writes that
    run before its check (recorded at derivation time).
    """
    if card.origin == "derived":
        info = derived_sources(store).get(card.id, {}).get(release)
        if info is not None:
            row = _check_rows(store, release).get((info.path, info.start)) if info.writes else None
            return row, info.deps
    return None, tuple(sorted(card.reads | helper_reads(card.when, card.require)))


# ------------------------------------------------------------------------ flags


def prepare_flags(store: Store, release: str, flags: list[str] | Mapping[str, Any],
                  catalog: Catalog | None = None) -> tuple[dict[str, Value], ParsedArgs]:
    """(attribute environment, parsed argv) for a token list or a ``{flag or attr: value}`` dict."""
    catalog = catalog or load_catalog(store, release)
    defaults = chain.cached(chain.release_key(store, release, "rules:defaults"),
                            lambda: base_attrs(catalog, ParsedArgs()))
    if isinstance(flags, Mapping):
        parsed = ParsedArgs()
        by_flag, by_attr = catalog.by_flag(), catalog.by_attr()
        attrs = dict(defaults)
        for key, value in flags.items():
            spec = by_flag.get(key) or by_attr.get(key) or by_attr.get(key.lstrip("-").replace("-", "_"))
            attr = spec.attr if spec is not None else key.lstrip("-").replace("-", "_")
            attrs[attr] = Value(value, Provenance("flag", f"{key}={value!r}"))
            parsed.values[attr] = ParsedFlag(attr, value, key, [key], 0,
                                             key if key.startswith("-") else "")
        return attrs, parsed
    parsed = parse_argv([str(t) for t in flags], catalog)
    attrs = dict(defaults)
    for attr, pf in parsed.values.items():
        attrs[attr] = Value(pf.value, Provenance("flag", " ".join(pf.raw)))
    return attrs, parsed


# --------------------------------------------------------------------- evaluation


def _given_fn(parsed: ParsedArgs):  # noqa: ANN202
    typed = {pf.flag or pf.token for pf in parsed.values.values()}
    typed |= {pf.token for pf in parsed.values.values()}

    def given(flag: object) -> object:
        return isinstance(flag, str) and flag in typed

    return given, tuple(sorted(typed))


def _inputs(results: list[Result]) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = []
    seen: set[str] = set()
    for res in results:
        for atom in res.atoms:
            for name, value, prov in atom.inputs:
                if name not in seen:
                    seen.add(name)
                    out.append((name, value, f"{prov.kind}: {prov.detail}" if prov.detail else prov.kind))
    return out


def _describe(inputs: list[tuple[str, object, str]], limit: int = 5) -> str:
    shown = [f"{n}={jsonable(v)!r} ({d})" for n, v, d in inputs if v is not UNKNOWN][:limit]
    return "; ".join(shown)


@functools.lru_cache(maxsize=16384)
def _conjuncts(text: str) -> tuple[str, ...]:
    """The top-level ``and`` operands of ``text``, innermost (last) first."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return (text,)
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return tuple(ast.unparse(v) for v in reversed(node.values))
    return (text,)


def _when(card: Card, env: Env) -> tuple[object, list[Result]]:
    """Kleene AND of ``when``'s operands, innermost guard first, stopping at the first false.

    Derived ``when``s are long chains of early exits; the innermost guard is the
    one most likely to be false, so this usually evaluates one operand, not all.
    """
    truth: object = True
    results: list[Result] = []
    for part in _conjuncts(card.when):
        res = evaluate(part, env)
        results.append(res)
        if res.truth is False:
            return False, results
        if res.truth is UNKNOWN:
            truth = UNKNOWN
    return truth, results


def _judge(card: Card, env: Env, notes: list[str]) -> CardResult:
    try:
        req = evaluate(card.require, env)
        if req.truth is True:
            return CardResult(card, "satisfied", "`require` holds", [], _inputs([req]), notes)
        w, parts = _when(card, env)
    except UnsafeExpression as exc:
        return CardResult(card, "unknown", f"unknown because the card could not be evaluated: "
                          f"{exc.message}", [card.id], notes=notes)
    r = req.truth
    inputs = _inputs([*parts, req])
    if w is False:
        return CardResult(card, "not_applicable", "`when` is false", [], inputs, notes)
    if w is True and r is False:
        why = _describe(_inputs([req])) or _describe(inputs)
        reason = f"{card.message} — `require` is false" + (f" with {why}" if why else "")
        return CardResult(card, "violated", reason, [], inputs, notes)
    when_unknowns = [n for p in parts if p.truth is UNKNOWN for n in p.unknowns]
    unknowns = list(dict.fromkeys([*when_unknowns, *(req.unknowns if r is UNKNOWN else ())]))
    names = ", ".join(unknowns[:6]) or "some inputs"
    verb = "is" if len(unknowns) == 1 else "are"
    part = "`when`" if w is UNKNOWN and r is not UNKNOWN else \
        "`require`" if w is not UNKNOWN else "`when` and `require`"
    reason = f"unknown because {names} {verb} not known ({part} undecided)"
    if notes:
        reason += "; " + notes[0]
    return CardResult(card, "unknown", reason, unknowns, inputs, notes)


def evaluate_cards(store: Store, release: str, attrs: Mapping[str, Value],
                   facts: Mapping[str, Value], parsed: ParsedArgs | None = None,
                   *, cards: list[Card] | None = None) -> list[CardResult]:
    """A :class:`CardResult` per card (default: every card of ``release``), memoised."""
    cards = cards if cards is not None else cards_for(store, release)
    given, typed = _given_fn(parsed or ParsedArgs())
    functions = {**_HELPERS, "given": given}
    fsig = _facts_sig(facts)
    guard_memo: dict[tuple[Any, ...], object] = {}
    base_env = Env(attrs, facts, functions)
    meta = _release_meta(store, release)
    reprs: dict[str, str] = {}
    spath = str(store.path)
    out: list[CardResult] = []
    for card in cards:
        got = meta.get(card.id)
        if got is None or got[0] is not card:
            got = meta[card.id] = (card, *_meta(store, release, card))
        _, row, deps = got
        values = []
        for d in deps:
            r = reprs.get(d)
            if r is None:
                r = reprs[d] = repr(attrs[d].value) if d in attrs else "?"
            values.append(r)
        key = (spath, release, card.id, card.when, card.require, fsig, tuple(values),
               typed if card.uses_given else ())
        with _lock:
            hit = _memo.get(key)
        if hit is not None:
            out.append(hit)
            continue
        env, notes = base_env, []
        if row is not None:
            local = dict(attrs)
            try:
                caveats, _ = apply_earlier_writes(store, release, row, local, dict(facts),
                                                  set(card.reads), guard_memo)
            except UnsafeExpression as exc:  # a write's guard outside the whitelist
                local = dict(attrs)
                caveats = [f"earlier writes not folded in: {exc.message}"]
            changed = {k: v for k, v in local.items() if attrs.get(k) is not v}
            if changed:
                env = Env(ChainMap(changed, attrs), facts, functions)  # type: ignore[arg-type]
            notes = caveats[:3]
        result = _judge(card, env, notes)
        with _lock:
            if len(_memo) >= _MEMO_MAX:
                _memo.clear()
            _memo[key] = result
        out.append(result)
    return out


# ------------------------------------------------------------------------ public API


def check(flags: list[str] | Mapping[str, Any], release: str,
          facts: Mapping[str, Value] | None = None, *, store: Store) -> list[RuleVerdict]:
    """One verdict per card applicable to ``release`` for ``flags`` under ``facts``.

    ``flags`` is an argv token list (without the program) or a ``{flag or attr: value}``
    dict; ``facts`` as built by :func:`facts_for` (or the engine); missing facts make
    the cards that need them ``unknown``, never a guess.
    """
    attrs, parsed = prepare_flags(store, release, flags)
    return [r.as_rule_verdict() for r in evaluate_cards(store, release, attrs, facts or {}, parsed)]


def check_fix(store: Store, release: str, argv: list[str] | Mapping[str, Any],
              facts: Mapping[str, Value] | None = None) -> tuple[list[RuleVerdict], bool]:
    """For the engine, on every candidate fix: (the decided verdicts, any error violated?).

    Only ``violated`` verdicts and the ``unknown`` ones of cards that read a flag
    of ``argv`` are returned (the others carry no news). The flag is True when an
    ``error`` card is violated that ``--model-path`` alone would not violate
    (see :func:`baseline_violations`); such a fix must not be recommended.
    """
    attrs, parsed = prepare_flags(store, release, argv)
    results = evaluate_cards(store, release, attrs, facts or {}, parsed)
    background = baseline_violations(store, release, attrs, facts or {})
    touched = set(parsed.values)
    relevant = [r.as_rule_verdict() for r in results if r.verdict == "violated"
                or (r.verdict == "unknown" and r.card.reads & touched)]
    bad = any(r.verdict == "violated" and r.card.severity == "error"
              and r.card.id not in background for r in results)
    return relevant, bad


def baseline_violations(store: Store, release: str, attrs: Mapping[str, Value],
                        facts: Mapping[str, Value]) -> frozenset[str]:
    """Cards violated by ``--model-path <the same model>`` alone (with the same facts).

    No flag choice causes (or cures) these: they hold for the release's defaults
    on this model and machine, and usually mark a guard the extraction could not
    see. They are reported, but do not make a command or a fix "violating".
    """
    model = attrs.get("model_path")
    value = str(model.value if model is not None and model.value is not None else "/models/model")
    key = ("baseline", str(store.path), derivation_key(store)[0], release, value,
           _facts_sig(facts))
    with _lock:
        hit = _baselines.get(key)
    if hit is not None:
        return hit
    base, parsed = prepare_flags(store, release, ["--model-path", value])
    out = frozenset(r.card.id for r in evaluate_cards(store, release, base, facts, parsed)
                    if r.verdict == "violated")
    with _lock:
        if len(_baselines) > 256:
            _baselines.clear()
        _baselines[key] = out
    return out
