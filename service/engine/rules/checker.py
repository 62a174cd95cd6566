"""Check a launch command against the rule cards of one release.

``check(flags, release, facts, store=...)`` gives one
:class:`~service.engine.answer.RuleVerdict` per card whose ``releases``
range contains ``release``:

* ``violated``       ``when`` is true and ``require`` is false;
* ``not_applicable`` ``when`` is false (``require`` is then not evaluated: a card that
  does not apply reads nothing its ``require`` names);
* ``satisfied``      ``when`` is not false and ``require`` is true;
* ``unknown``        anything else; the reason names the unknown inputs.

The cards of a release and their dependencies come from
:mod:`service.engine.rules.release_cards`, one card's verdict from
:mod:`service.engine.rules.card_verdict`, the facts and the functions conditions may call
from :mod:`service.engine.rules.card_env`.

The attribute environment is the release's own: defaults from its flag catalog
(:func:`~service.engine.evaluate.path_condition.base_attrs`), then the user's flags
parsed with that catalog (:func:`~service.engine.flags.parse.parse_argv`).
For a *derived* card, the writes that run before its check in that release
(``NEXTN`` -> ``EAGLE``, a default chosen from others) are folded into each attribute
it reads, giving the values the engine's fold of the check gives them
(:class:`~service.engine.evaluate.fold_slice.FoldedView`); curated cards speak about
the flags as given.

Speed: each card's verdict is memoised on the values (and provenance) of
everything it depends on (the attributes its conditions read, plus those read
by the guards and values of the writes folded in for it) and on the facts.
On a miss, a verdict of another command is reused when the attributes and facts
its evaluation actually read (:mod:`service.engine.rules.attr_reads`) are answered
alike: ``when`` usually stops at its first false operand, and a card that does not apply
is recorded with what that operand reads alone; what a verdict does not show is recorded by
value (:mod:`service.engine.rules.card_records`). The earlier writes are folded one
attribute at a time, on first read (:mod:`service.engine.evaluate.fold_slice`).
The cards of a release are indexed by those dependencies: the verdicts under
the release's defaults are computed once per set of facts, and a command
(another fix candidate) re-evaluates only the cards depending on an attribute
in which it differs from the last command evaluated with the same facts (or from the
defaults), plus those that look at flag spellings. The cards judged for one command share
the slice folds made for it. A flag with choices read only through tests against literals
is kept in a verdict's record as the answers to those tests
(:mod:`service.engine.rules.value_classes`). :func:`check_fix` answers
are cached per (release, argv, facts) as well; every cache is bounded and
thread-safe (:mod:`service.engine.cache`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from kb.catalog_types import Catalog
from kb.catalogs import load_catalog
from kb.rules.cards import Card
from kb.store import Store
from service.engine.answer import RuleVerdict
from service.engine.cache import LRUCache, cached, facts_signature, release_key
from service.engine.evaluate.path_condition import base_attrs, value_signature
from service.engine.expr.interpreter import Provenance, Value
from service.engine.expr.trace import Reads, reads_match
from service.engine.flags.parse import ParsedArgs, ParsedFlag, parse_argv
from service.engine.rules.attr_reads import attrs_match
from service.engine.rules.card_env import CARD_FUNCTIONS, facts_for
from service.engine.rules.card_records import (
    Judging,
    Record,
    ViewRecord,
    judge_fresh,
    view_served,
)
from service.engine.rules.card_verdict import CardResult, Verdict, given_function
from service.engine.rules.release_cards import (
    CardEntry,
    card_entry,
    cards_for,
    current_derivation_key,
    release_plan,
)
from service.engine.rules.value_classes import rebased

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

# (release, card, values of its dependencies) -> its verdicts, each with the facts it read
_memo: LRUCache[tuple[tuple[Reads, CardResult], ...]] = LRUCache("rules.card_verdicts", 100_000)
#: per card and dependency values, this many verdicts are kept (one per way facts answered)
_VARIANTS = 8
# (release, card, typed spellings if it asks) -> verdicts, each with the attributes and facts
# its evaluation read: a command that answers those reads alike gets the same verdict
_by_reads: LRUCache[tuple[Record, ...]] = LRUCache("rules.card_verdicts_by_reads", 20_000)
_READ_VARIANTS = 16
# the same key -> a derived card's verdicts, each with what its conditions read through the
# folded view: a command whose folds give those values gets the same verdict
_by_view: LRUCache[tuple[ViewRecord, ...]] = LRUCache("rules.card_verdicts_by_view", 20_000)
# (release, cards, facts) -> card index -> its verdict for the release's defaults (filled
# lazily, for the cards the commands checked so far leave at the defaults)
_reference: LRUCache[dict[int, CardResult]] = LRUCache("rules.defaults_verdicts", 64)
# (release, argv, facts) -> check_fix's answer
_fix_answers: LRUCache[tuple[list[RuleVerdict], bool]] = LRUCache("rules.check_fix", 4096)
_baselines: LRUCache[frozenset[str]] = LRUCache("rules.baselines", 256)
# (release, cards, facts) -> the last command evaluated with them: the signature of each of
# its attributes and every card's verdict (a fix candidate differs from the last in a flag
# or two: only the cards depending on those are judged)
_last: LRUCache[tuple[dict[str, object], tuple[CardResult, ...]]] = LRUCache(
    "rules.last_command", 64
)


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


def _defaults(store: Store, release: str, catalog: Catalog | None = None) -> dict[str, Value]:
    """The release's attribute defaults (:func:`base_attrs` without flags), cached; read-only."""

    def build() -> dict[str, Value]:
        return base_attrs(catalog or load_catalog(store, release), ParsedArgs())

    return cached(release_key(store, release, "rules:defaults"), build)


def _choice_attrs(store: Store, release: str) -> frozenset[str]:
    """The release's attributes whose flag lists its choices (backends, dtypes, modes):
    those a card's record may keep by the answers to its tests
    (:func:`~service.engine.rules.value_classes.card_tests`)."""

    def build() -> frozenset[str]:
        catalog = load_catalog(store, release)
        return frozenset(spec.attr for spec in catalog.by_attr().values() if spec.choices)

    return cached(release_key(store, release, "rules:choice-attrs"), build)


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

    A verdict depends only on the card's dependencies (see
    :func:`~service.engine.rules.release_cards.card_entry`), the facts and, for cards
    using ``given()``, the spellings typed. For the whole
    release, a card that depends on no attribute in which the command differs from the last
    one evaluated with these facts (and does not use ``given()``) keeps that command's
    verdict; with no such command, its verdict under the release's defaults, computed once
    per set of facts when first needed. The others are evaluated through the per-card memo.
    """
    parsed = parsed or ParsedArgs()
    fsig = facts_sig or facts_signature(facts)
    if cards is not None:
        entries = [card_entry(store, release, c) for c in cards]
        return _evaluate(store, release, entries, attrs, facts, parsed)
    plan = release_plan(store, release)
    sigs = {k: value_signature(v) for k, v in attrs.items()}
    last = _last.get((plan.key, fsig))
    earlier: Sequence[CardResult | None]  # per card; ``None``: judged below
    if last is not None:  # another command with these facts: only what differs is judged
        last_sigs, earlier = last
        changed = {k for k in sigs.keys() | last_sigs.keys() if sigs.get(k) != last_sigs.get(k)}
    else:
        defaults = _defaults(store, release)
        changed = _changed(attrs, defaults)
    todo = set(plan.given)
    for attr in changed:
        todo.update(plan.by_dep.get(attr, ()))
    if last is None:
        # the verdicts under the defaults, filled lazily: only for cards a command leaves there
        ref = _reference.get_or_build((plan.key, fsig), dict)
        missing = [i for i in range(len(plan.entries)) if i not in todo and i not in ref]
        if missing:
            evaluated = _evaluate(
                store, release, [plan.entries[i] for i in missing], defaults, facts, ParsedArgs()
            )
            ref.update(zip(missing, evaluated, strict=True))
        earlier = [ref.get(i) for i in range(len(plan.entries))]
    order = sorted(todo)
    entries = [plan.entries[i] for i in order]
    fresh = _evaluate(store, release, entries, attrs, facts, parsed, sigs)
    filled = list(earlier)
    for i, result in zip(order, fresh, strict=True):
        filled[i] = result
    out = cast(list[CardResult], filled)  # every card not judged above has its verdict
    _last.put((plan.key, fsig), (sigs, tuple(out)))
    return out


def _evaluate(
    store: Store,
    release: str,
    entries: list[CardEntry],
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    parsed: ParsedArgs,
    known: Mapping[str, object] | None = None,
) -> list[CardResult]:
    """Each entry's verdict, through the per-card memo. ``known``: the signatures
    (:func:`value_signature`) of ``attrs`` already computed."""
    given, typed = given_function(parsed)
    ctx = Judging(attrs, facts, {**CARD_FUNCTIONS, "given": given}, _choice_attrs(store, release))
    sigs: dict[str, object] = dict(known or {})
    fact_sigs = ctx.fact_sigs
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
            tuple(values),
            typed if e.uses_given else (),
        )
        # one entry per way the facts answered the card's reads of them
        variants = _memo.get(key) or ()
        hit = next((r for reads, r in variants if reads_match(reads, facts, fact_sigs)), None)
        if hit is not None:
            out.append(hit)
            continue
        # another command's verdict, when these attributes and facts answer its reads alike
        rkey_card = (rkey, card.id, card.when, card.require, key[-1])
        seen = _by_reads.get(rkey_card) or ()
        for attr_reads, fact_reads, result, origin, shown in seen:
            if attrs_match(attr_reads, attrs, sigs) and reads_match(fact_reads, facts, fact_sigs):
                served = rebased(result, origin, attrs, shown)
                if served is None:  # its reason quotes another value: judge afresh
                    continue
                _memo.put(key, (*variants, (fact_reads, served))[-_VARIANTS:])
                out.append(served)
                break
        else:
            viewed = _by_view.get(rkey_card) or ()
            got = view_served(store, release, e, ctx, viewed) if viewed else None
            if got is not None:
                _memo.put(key, (*variants, (got[1], got[0]))[-_VARIANTS:])
                out.append(got[0])
                continue
            result, fact_reads, record, view = judge_fresh(store, release, e, ctx)
            _memo.put(key, (*variants, (fact_reads, result))[-_VARIANTS:])
            if record is not None:
                _by_reads.put(rkey_card, (*seen, record)[-_READ_VARIANTS:])
            if view is not None:
                _by_view.put(rkey_card, (*viewed, view)[-_READ_VARIANTS:])
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
    key = (
        release_key(store, release, "rules:check_fix"),
        current_derivation_key(store),
        flags,
        fsig,
    )
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
    # only a card violated here can be a background one: the baseline of those alone
    violated = [r.card for r in results if r.verdict == "violated"]
    background = baseline_violations(store, release, attrs, facts, facts_sig=fsig, among=violated)
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
    among: list[Card] | None = None,
) -> frozenset[str]:
    """Cards violated by ``--model-path <the same model>`` alone (with the same facts).

    No flag choice causes (or cures) these: they hold for the release's defaults
    on this model and machine, and usually mark a guard the extraction could not
    see. They are reported, but do not make a command or a fix "violating".
    ``among``: only these cards are asked about (evaluated, unless the release's whole
    answer is cached already): what a caller that knows which cards matter needs.
    """
    model = attrs.get("model_path")
    value = str(model.value if model is not None and model.value is not None else "/models/model")
    fsig = facts_sig or facts_signature(facts)
    key = (
        "baseline",
        release_key(store, release, "rules:baseline"),
        current_derivation_key(store),
        value,
        fsig,
    )

    def violated(cards: list[Card] | None) -> frozenset[str]:
        base, parsed = prepare_flags(store, release, ["--model-path", value])
        return frozenset(
            r.card.id
            for r in evaluate_cards(
                store, release, base, facts, parsed, cards=cards, facts_sig=fsig
            )
            if r.verdict == "violated"
        )

    if among is not None:
        whole = _baselines.get(key)
        if whole is not None:
            return whole & {c.id for c in among}
        return violated(among) if among else frozenset()
    return _baselines.get_or_build(key, lambda: violated(None))
