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
by the guards and values of the writes folded in for it; a model path by its class when
the evaluation read it only so) and on the facts.
On a miss, a verdict of another command is reused when the attributes and facts
its evaluation actually read (:mod:`service.engine.rules.attr_reads`) are answered
alike: ``when`` usually stops at its first false operand, and a card that does not apply
is recorded with what that operand reads alone; what a verdict does not show is recorded by
value (:mod:`service.engine.rules.card_records`). A derived card's verdict is also
recorded by the folded values its conditions read (a *view record*): a candidate whose
folds give those values gets it without evaluating the card. The earlier writes are folded
one attribute at a time, on first read (:mod:`service.engine.evaluate.fold_slice`), and a
slice folded again for values differing in a few names evaluates only the writes those
reach.

Every verdict comes with the attributes it rested on (those its evaluation read, the folds'
reads included). A command (another fix candidate) is judged from the nearer of two bases:
the last command evaluated with the same facts, or the release's defaults (their verdicts
computed once per set of facts, lazily). Only the cards whose verdict there rested on an
attribute in which the command differs are judged again, plus those that look at flag
spellings. The cards judged for one command share the slice folds made for it, and take
over those of the last command judged under the same facts that read none of the
attributes that differ. The facts' answers and the guard memo of the folds are shared by
every evaluation under the same facts. A flag with choices read only through tests against
literals is kept in a verdict's record as the answers to those tests
(:mod:`service.engine.rules.value_classes`). :func:`check_fix` answers are cached per
(release, argv, facts) as well; every cache is bounded and thread-safe
(:mod:`service.engine.cache`).
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
from service.engine.evaluate.path_condition import base_attrs
from service.engine.expr.interpreter import Provenance, Value
from service.engine.flags.parse import ParsedArgs, ParsedFlag, parse_argv
from service.engine.rules.card_env import facts_for
from service.engine.rules.card_memo import Deps, differing, judge_entries
from service.engine.rules.card_verdict import CardResult, Verdict
from service.engine.rules.release_cards import (
    ReleasePlan,
    card_entry,
    cards_for,
    current_derivation_key,
    release_plan,
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

# (release, cards, facts) -> card index -> its verdict for the release's defaults (filled
# lazily, for the cards the commands checked so far leave at the defaults)
_reference: LRUCache[dict[int, tuple[CardResult, Deps]]] = LRUCache("rules.defaults_verdicts", 64)
# (release, argv, facts) -> check_fix's answer
_fix_answers: LRUCache[tuple[list[RuleVerdict], bool]] = LRUCache("rules.check_fix", 4096)
_baselines: LRUCache[frozenset[str]] = LRUCache("rules.baselines", 256)
# (release, cards, facts) -> the last command evaluated with them: its attributes and every
# card's verdict (a fix candidate differs from the last in a flag or two: only the cards
# whose verdict rested on those are judged)
_last: LRUCache[tuple[dict[str, Value], tuple[tuple[CardResult, Deps], ...]]] = LRUCache(
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


def _todo(
    plan: ReleasePlan,
    base: Sequence[tuple[CardResult, Deps] | None] | Mapping[int, tuple[CardResult, Deps]],
    changed: set[str],
) -> tuple[set[int], list[int]]:
    """For a command differing from one whose verdicts are ``base`` in the attributes
    ``changed``: (the cards to judge, the cards ``base`` lacks that the command leaves
    alone). A card is judged when it asks for the spellings typed, has no verdict in
    ``base``, or its verdict there rested on a changed attribute (or on all of them)."""
    maybe: set[int] = set()
    for attr in changed:
        maybe.update(plan.by_dep.get(attr, ()))
    todo = set(plan.given)
    for i in maybe:
        known = base[i] if isinstance(base, Sequence) else base.get(i)
        if known is None or known[1] is None or not changed.isdisjoint(known[1]):
            todo.add(i)
    if isinstance(base, Sequence):
        return todo, []
    return todo, [i for i in range(len(plan.entries)) if i not in todo and i not in base]


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

    A verdict depends only on the attributes its evaluation read (at most the card's
    dependencies, :func:`~service.engine.rules.release_cards.card_entry`), the facts and,
    for cards using ``given()``, the spellings typed. For the whole release, the command
    is compared with two bases under these facts: the last command evaluated, and the
    release's defaults (their verdicts computed once per set of facts, for the cards
    needed). From the base with less to judge, a card whose verdict rested on no attribute
    in which the command differs (and that does not use ``given()``) keeps its verdict.
    The others are evaluated through the per-card memo.
    """
    parsed = parsed or ParsedArgs()
    fsig = facts_sig or facts_signature(facts)
    if cards is not None:
        entries = [card_entry(store, release, c) for c in cards]
        return [r for r, _ in judge_entries(store, release, entries, attrs, facts, fsig, parsed)]
    plan = release_plan(store, release)
    defaults = _defaults(store, release)
    # the verdicts under the defaults, filled lazily: only for cards a command leaves there
    ref = _reference.get_or_build((plan.key, fsig), dict)
    todo, missing = _todo(plan, ref, differing(attrs, defaults))
    base: Sequence[tuple[CardResult, Deps] | None] | None = None  # per card; ``None``: judged
    last = _last.get((plan.key, fsig))
    if last is not None:  # another command with these facts: the nearer base is taken
        last_attrs, earlier = last
        near_todo, _ = _todo(plan, earlier, differing(attrs, last_attrs))
        if len(near_todo) <= len(todo) + len(missing):
            base, todo, missing = earlier, near_todo, []
    if missing:
        evaluated = judge_entries(
            store, release, [plan.entries[i] for i in missing], defaults, facts, fsig, ParsedArgs()
        )
        ref.update(zip(missing, evaluated, strict=True))
    if base is None:
        base = [ref.get(i) for i in range(len(plan.entries))]
    order = sorted(todo)
    entries = [plan.entries[i] for i in order]
    fresh = judge_entries(store, release, entries, attrs, facts, fsig, parsed)
    filled = list(base)
    for i, judged in zip(order, fresh, strict=True):
        filled[i] = judged
    out = cast(list[tuple[CardResult, Deps]], filled)  # every card not judged has its verdict
    _last.put((plan.key, fsig), (dict(attrs), tuple(out)))
    return [r for r, _ in out]


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
