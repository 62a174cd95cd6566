"""Check a launch command against the rule cards of one release.

``check(flags, release, facts, store=...)`` gives one
:class:`~service.engine.answer.RuleVerdict` per card whose ``releases``
range contains ``release``:

* ``violated``       ``when`` is true and ``require`` is false;
* ``satisfied``      ``require`` is true (then ``when`` does not matter);
* ``not_applicable`` ``when`` is false;
* ``unknown``        anything else; the reason names the unknown inputs.

The attribute environment is the release's own: defaults from its flag catalog
(:func:`~service.engine.evaluate.path_condition.base_attrs`), then the user's flags
parsed with that catalog (:func:`~service.engine.flags.parse.parse_argv`).
For a *derived* card, the writes that run before its check in that release
(``NEXTN`` -> ``EAGLE``, a default chosen from others) are folded in first with
:func:`~service.engine.evaluate.path_condition.fold_earlier_writes`, exactly as the
engine does for the check itself; curated cards speak about the flags as given.

Speed: each card's verdict is memoised on the values (and provenance) of
everything it depends on (the attributes its conditions read, plus those read
by the guards and values of the writes folded in for it) and on the facts.
The cards of a release are indexed by those dependencies: the verdicts under
the release's defaults are computed once per set of facts, and a command
(another fix candidate) re-evaluates only the cards depending on an attribute
it changes, plus those that look at flag spellings. :func:`check_fix` answers
are cached per (release, argv, facts) as well; every cache is bounded and
thread-safe (:mod:`service.engine.cache`).
"""

from __future__ import annotations

import ast
import functools
import threading
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kb.catalog_types import Catalog
from kb.catalogs import load_catalog
from kb.errors import UnsafeExpression
from kb.rules.cards import Card, helper_reads, load_curated
from kb.store import Store
from service.engine.answer import RuleVerdict, jsonable
from service.engine.cache import LRUCache, cached, facts_signature, recent, release_key
from service.engine.evaluate.path_condition import base_attrs, fold_earlier_writes, value_signature
from service.engine.expr.interpreter import (
    UNKNOWN,
    Env,
    Provenance,
    Result,
    Value,
    evaluate,
)
from service.engine.flags.parse import ParsedArgs, ParsedFlag, parse_argv
from service.engine.rules.derive import (
    derivation_key,
    derive_cards_for,
    derived_sources,
    qualifying_checks,
)
from service.engine.rules.helpers import (
    _HELPERS,
    facts_for,
)

__all__ = [
    "CardResult",
    "Verdict",
    "baseline_violations",
    "cards_for",
    "check",
    "check_fix",
    "evaluate_cards",
    "facts_for",
    "prepare_flags",
]

Verdict = Literal["violated", "satisfied", "unknown", "not_applicable"]

_lock = threading.Lock()
_releases_cache: dict[tuple[Any, ...], list[Card]] = {}
# (release, card, facts, values of its dependencies) -> its verdict
_memo: LRUCache[CardResult] = LRUCache("rules.card_verdicts", 30_000)
# (release, cards, facts) -> every card's verdict for the release's defaults
_reference: LRUCache[list[CardResult]] = LRUCache("rules.defaults_verdicts", 16)
# (release, argv, facts) -> check_fix's answer
_fix_answers: LRUCache[tuple[list[RuleVerdict], bool]] = LRUCache("rules.check_fix", 4096)
_baselines: LRUCache[frozenset[str]] = LRUCache("rules.baselines", 256)


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
        return RuleVerdict(
            rule=self.card.id, verdict=self.verdict, severity=self.card.severity, reason=self.reason
        )


# --------------------------------------------------------------------------- facts


# -------------------------------------------------------------------------- helpers
# Pure summaries of 0.5.2x helpers that derived conditions call (runtime_context.py,
# arg_groups/model_override_base.py). They receive the argument view and read attributes
# through it, so every read is recorded as an input.


# ----------------------------------------------------------------------- the cards


def _derivation_key(store: Store) -> str:
    """:func:`derivation_key` of ``store``, re-read at most every few seconds (as
    :func:`~service.engine.cache.release_key` re-reads content hashes)."""
    return recent(("derivation-key", str(store.path)), lambda: derivation_key(store)[0])


def cards_for(store: Store, release: str) -> list[Card]:
    """Curated and derived cards whose range contains ``release`` (cached)."""
    curated = load_curated()
    key = (
        str(store.path),
        _derivation_key(store),
        release,
        id(curated[0]) if curated else 0,
        len(curated),
    )
    with _lock:
        hit = _releases_cache.get(key)
    if hit is not None:
        return hit
    cards = [*(c for c in curated if c.applies_to(release)), *derive_cards_for(store, release)]
    with _lock:
        if len(_releases_cache) > 64:
            _releases_cache.clear()
        _releases_cache[key] = cards
    return cards


def _check_rows(store: Store, release: str) -> dict[tuple[str, int], dict[str, Any]]:
    return cached(
        release_key(store, release, "rules:check_rows"),
        lambda: {(r["path"], r["start_line"]): r for r in qualifying_checks(store, release)},
    )


def _release_meta(store: Store, release: str) -> dict[str, tuple[Card, Any, tuple[str, ...]]]:
    """card id -> (card, source check row or None, dependencies): filled lazily, per release."""
    return cached(release_key(store, release, "rules:meta"), dict)


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


@dataclass(frozen=True)
class _Entry:
    """What evaluating one card in one release needs besides the inputs."""

    card: Card
    row: dict[str, Any] | None  # the check whose earlier writes are folded in, if any
    deps: tuple[str, ...]
    uses_given: bool


@dataclass(frozen=True)
class _Plan:
    """The cards of a release, indexed by the attributes their verdicts depend on."""

    key: tuple[Any, ...]
    cards: list[Card]
    entries: list[_Entry]
    by_dep: dict[str, tuple[int, ...]]  # attribute -> indexes of the cards depending on it
    given: tuple[int, ...]  # indexes of the cards that look at flag spellings


def _entry(store: Store, release: str, card: Card) -> _Entry:
    meta = _release_meta(store, release)
    got = meta.get(card.id)
    if got is None or got[0] is not card:
        got = meta[card.id] = (card, *_meta(store, release, card))
    return _Entry(card, got[1], got[2], card.uses_given)


def _plan(store: Store, release: str) -> _Plan:
    """Every card of ``release`` with its dependencies, and the index by dependency (cached)."""
    cards = cards_for(store, release)
    key = (*release_key(store, release, "rules:plan"), id(cards), len(cards))

    def build() -> _Plan:
        entries = [_entry(store, release, c) for c in cards]
        by_dep: dict[str, list[int]] = {}
        for i, e in enumerate(entries):
            for d in e.deps:
                by_dep.setdefault(d, []).append(i)
        return _Plan(
            key,
            cards,
            entries,
            {d: tuple(v) for d, v in by_dep.items()},
            tuple(i for i, e in enumerate(entries) if e.uses_given),
        )

    plan = cached(key, build)
    return plan if plan.cards is cards else build()


# ------------------------------------------------------------------------ flags


def prepare_flags(
    store: Store, release: str, flags: list[str] | Mapping[str, Any], catalog: Catalog | None = None
) -> tuple[dict[str, Value], ParsedArgs]:
    """(attribute environment, parsed argv) for a token list or a ``{flag or attr: value}`` dict."""
    catalog = catalog or load_catalog(store, release)
    defaults = _defaults(store, release, catalog)
    if isinstance(flags, Mapping):
        parsed = ParsedArgs()
        by_flag, by_attr = catalog.by_flag(), catalog.by_attr()
        attrs = dict(defaults)
        for key, value in flags.items():
            spec = (
                by_flag.get(key)
                or by_attr.get(key)
                or by_attr.get(key.lstrip("-").replace("-", "_"))
            )
            attr = spec.attr if spec is not None else key.lstrip("-").replace("-", "_")
            attrs[attr] = Value(value, Provenance("flag", f"{key}={value!r}"))
            parsed.values[attr] = ParsedFlag(
                attr, value, key, [key], 0, key if key.startswith("-") else ""
            )
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
                    out.append(
                        (name, value, f"{prov.kind}: {prov.detail}" if prov.detail else prov.kind)
                    )
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
        return CardResult(
            card,
            "unknown",
            f"unknown because the card could not be evaluated: {exc.message}",
            [card.id],
            notes=notes,
        )
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
    part = (
        "`when`"
        if w is UNKNOWN and r is not UNKNOWN
        else "`require`"
        if w is not UNKNOWN
        else "`when` and `require`"
    )
    reason = f"unknown because {names} {verb} not known ({part} undecided)"
    if notes:
        reason += "; " + notes[0]
    return CardResult(card, "unknown", reason, unknowns, inputs, notes)


def _defaults(store: Store, release: str, catalog: Catalog | None = None) -> dict[str, Value]:
    """The release's attribute defaults (:func:`base_attrs` without flags), cached; read-only."""

    def build() -> dict[str, Value]:
        return base_attrs(catalog or load_catalog(store, release), ParsedArgs())

    return cached(release_key(store, release, "rules:defaults"), build)


def _changed(attrs: Mapping[str, Value], defaults: Mapping[str, Value]) -> set[str]:
    """Attributes whose value or provenance in ``attrs`` differs from the defaults'."""
    out: set[str] = set()
    for key in attrs.keys() | defaults.keys():
        a, d = attrs.get(key), defaults.get(key)
        if a is not d and value_signature(a) != value_signature(d):
            out.add(key)
    return out


def evaluate_cards(
    store: Store,
    release: str,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    parsed: ParsedArgs | None = None,
    *,
    cards: list[Card] | None = None,
    facts_sig: str | None = None,
) -> list[CardResult]:
    """A :class:`CardResult` per card (default: every card of ``release``), memoised.

    A verdict depends only on the card's dependencies (see :func:`_meta`), the
    facts and, for cards using ``given()``, the spellings typed. For the whole
    release the verdicts under the release's defaults are computed once per set
    of facts; a command re-evaluates (through the per-card memo) only the cards
    that depend on an attribute it changes, and the cards using ``given()``.
    """
    parsed = parsed or ParsedArgs()
    fsig = facts_sig or facts_signature(facts)
    if cards is not None:
        entries = [_entry(store, release, c) for c in cards]
        return _evaluate(store, release, entries, attrs, facts, parsed, fsig)
    plan = _plan(store, release)
    defaults = _defaults(store, release)
    ref = _reference.get_or_build(
        (plan.key, fsig),
        lambda: _evaluate(store, release, plan.entries, defaults, facts, ParsedArgs(), fsig),
    )
    todo = set(plan.given)
    for attr in _changed(attrs, defaults):
        todo.update(plan.by_dep.get(attr, ()))
    out = list(ref)
    order = sorted(todo)
    for i, res in zip(
        order,
        _evaluate(store, release, [plan.entries[i] for i in order], attrs, facts, parsed, fsig),
        strict=True,
    ):
        out[i] = res
    return out


def _evaluate(
    store: Store,
    release: str,
    entries: list[_Entry],
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    parsed: ParsedArgs,
    fsig: str,
) -> list[CardResult]:
    """Each entry's verdict, through the per-card memo."""
    given, typed = _given_fn(parsed)
    functions = {**_HELPERS, "given": given}
    guard_memo: dict[tuple[Any, ...], object] = {}
    base_env = Env(attrs, facts, functions)
    sigs: dict[str, object] = {}
    rkey = release_key(store, release, "rules:verdict")
    out: list[CardResult] = []
    for e in entries:
        card = e.card
        values = []
        for d in e.deps:
            sig = sigs.get(d)
            if sig is None:
                sig = sigs[d] = value_signature(attrs.get(d))
            values.append(sig)
        key = (
            rkey,
            card.id,
            card.when,
            card.require,
            fsig,
            tuple(values),
            typed if e.uses_given else (),
        )
        hit = _memo.get(key)
        if hit is not None:
            out.append(hit)
            continue
        env, notes = base_env, []
        if e.row is not None:
            try:
                # the card's verdict is memoised on the same inputs: no need to keep the fold
                assigned, caveats, _ = fold_earlier_writes(
                    store,
                    release,
                    e.row,
                    attrs,
                    dict(facts),
                    card.reads,
                    guard_memo,
                    facts_sig=fsig,
                    cache=False,
                )
            except UnsafeExpression as exc:  # a write's guard outside the whitelist
                assigned, caveats = (), [f"earlier writes not folded in: {exc.message}"]
            final = dict(assigned)  # the last assignment of each attribute wins
            changed = {k: v for k, v in final.items() if attrs.get(k) is not v}
            if changed:
                env = Env(ChainMap(changed, attrs), facts, functions)  # type: ignore[arg-type]
            notes = caveats[:3]
        result = _judge(card, env, notes)
        _memo.put(key, result)
        out.append(result)
    return out


# ------------------------------------------------------------------------ public API


def check(
    flags: list[str] | Mapping[str, Any],
    release: str,
    facts: Mapping[str, Value] | None = None,
    *,
    store: Store,
) -> list[RuleVerdict]:
    """One verdict per card applicable to ``release`` for ``flags`` under ``facts``.

    ``flags`` is an argv token list (without the program) or a ``{flag or attr: value}``
    dict; ``facts`` as built by :func:`facts_for` (or the engine); missing facts make
    the cards that need them ``unknown``, never a guess.
    """
    attrs, parsed = prepare_flags(store, release, flags)
    return [r.as_rule_verdict() for r in evaluate_cards(store, release, attrs, facts or {}, parsed)]


def check_fix(
    store: Store,
    release: str,
    argv: list[str] | Mapping[str, Any],
    facts: Mapping[str, Value] | None = None,
    *,
    facts_sig: str | None = None,
) -> tuple[list[RuleVerdict], bool]:
    """For the engine, on every candidate fix: (the decided verdicts, any error violated?).

    Only ``violated`` verdicts and the ``unknown`` ones of cards that read a flag
    of ``argv`` are returned (the others carry no news). The flag is True when an
    ``error`` card is violated that ``--model-path`` alone would not violate
    (see :func:`baseline_violations`); such a fix must not be recommended.
    The answer is a pure function of the release, ``argv`` and the facts, and is
    cached on them (bounded); the verdicts returned are fresh copies. ``facts_sig``
    is :func:`~service.engine.cache.facts_signature` of ``facts`` when known.
    """
    facts = facts or {}
    fsig = facts_sig or facts_signature(facts)
    flags = (
        tuple((k, repr(v)) for k, v in argv.items())
        if isinstance(argv, Mapping)
        else ("argv", *map(str, argv))
    )
    key = (release_key(store, release, "rules:check_fix"), _derivation_key(store), flags, fsig)
    verdicts, bad = _fix_answers.get_or_build(
        key, lambda: _check_fix(store, release, argv, facts, fsig)
    )
    return [v.model_copy() for v in verdicts], bad


def _check_fix(
    store: Store,
    release: str,
    argv: list[str] | Mapping[str, Any],
    facts: Mapping[str, Value],
    fsig: str,
) -> tuple[list[RuleVerdict], bool]:
    attrs, parsed = prepare_flags(store, release, argv)
    results = evaluate_cards(store, release, attrs, facts, parsed, facts_sig=fsig)
    background = baseline_violations(store, release, attrs, facts, facts_sig=fsig)
    touched = set(parsed.values)
    relevant = [
        r.as_rule_verdict()
        for r in results
        if r.verdict == "violated" or (r.verdict == "unknown" and r.card.reads & touched)
    ]
    for v in relevant:
        v.background = v.verdict == "violated" and v.rule in background
    bad = any(
        r.verdict == "violated" and r.card.severity == "error" and r.card.id not in background
        for r in results
    )
    return relevant, bad


def baseline_violations(
    store: Store,
    release: str,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    *,
    facts_sig: str | None = None,
) -> frozenset[str]:
    """Cards violated by ``--model-path <the same model>`` alone (with the same facts).

    No flag choice causes (or cures) these: they hold for the release's defaults
    on this model and machine, and usually mark a guard the extraction could not
    see. They are reported, but do not make a command or a fix "violating".
    """
    model = attrs.get("model_path")
    value = str(model.value if model is not None and model.value is not None else "/models/model")
    fsig = facts_sig or facts_signature(facts)
    key = (
        "baseline",
        release_key(store, release, "rules:baseline"),
        _derivation_key(store),
        value,
        fsig,
    )

    def build() -> frozenset[str]:
        base, parsed = prepare_flags(store, release, ["--model-path", value])
        return frozenset(
            r.card.id
            for r in evaluate_cards(store, release, base, facts, parsed, facts_sig=fsig)
            if r.verdict == "violated"
        )

    return _baselines.get_or_build(key, build)
