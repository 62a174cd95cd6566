"""Lint a launch command against a release's rule cards, with checked fixes.

``lint(store, release, argv, hardware=None, model_arch=None)`` checks every
card of the release (:mod:`service.engine.rules.checker`) and reports:

* ``violated``   cards the flags violate, errors first, each with up to three fixes;
* ``unknown``    cards that read one of the flags but cannot be decided, naming
  the missing inputs (hardware, model architecture, a value SGLang computes);
* ``background`` cards violated by ``--model-path`` alone on this machine and
  model: no flag causes them, so they do not make the command fail the lint.

Fix candidates come from the card itself: its ``fix_hints``, dropping a flag
its ``require`` reads, setting a value ``require`` compares with, and (last)
dropping a flag its ``when`` reads. Each candidate is applied to the argv with
:func:`~service.engine.flags.parse.apply_edits`, rendered with
:func:`~service.engine.flags.parse.render_command`, and re-checked against
*every* card: it is ``verified`` only when the card then holds (or no longer
applies) and no other error card becomes violated; a candidate that trips a
neighbour is kept but demoted and names the card it trips.
"""

from __future__ import annotations

import ast
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from kb.catalog_types import Catalog
from kb.catalogs import load_catalog
from kb.rules.cards import Card
from kb.store import Store
from service.engine.answer import jsonable
from service.engine.expr.interpreter import Value, referenced_names
from service.engine.facts.core import model_arch_for
from service.engine.flags.edit import apply_edits, render_command
from service.engine.rules.checker import (
    CardResult,
    baseline_violations,
    evaluate_cards,
    facts_for,
    prepare_flags,
)

__all__ = ["LintFinding", "LintFix", "LintReport", "lint"]

MAX_CANDIDATES = 8
MAX_FIXES = 3
MAX_FIXED_FINDINGS = 12
_ORIGIN_RANK = {
    "card fix_hints": 0,
    "drop a flag the card requires": 1,
    "a value the card accepts": 1,
    "drop a flag that enables the card": 2,
}


class LintFix(BaseModel):
    """One candidate fix, re-checked against every card of the release."""

    set: dict[str, Any] = Field(default_factory=dict)  # flag spelling -> value
    remove: list[str] = Field(default_factory=list)  # flag spellings
    argv: list[str]
    command: str
    origin: str
    verified: bool
    card_after: Literal["violated", "satisfied", "unknown", "not_applicable"]
    trips: list[str] = Field(default_factory=list)  # ids of error cards the fix newly violates
    note: str = ""


class LintFinding(BaseModel):
    rule: str
    title: str
    verdict: Literal["violated", "unknown"]
    severity: str
    origin: str
    message: str
    reason: str
    unknowns: list[str] = Field(default_factory=list)
    citations: list[str] = Field(default_factory=list)
    fixes: list[LintFix] = Field(default_factory=list)


class LintReport(BaseModel):
    release: str
    hardware: str | None = None
    model_arch: str | None = None
    argv: list[str]
    command: str
    ok: bool  # no error card violated by the flags
    counts: dict[str, int] = Field(default_factory=dict)
    violated: list[LintFinding] = Field(default_factory=list)
    unknown: list[LintFinding] = Field(default_factory=list)
    background: list[LintFinding] = Field(default_factory=list)
    parse_errors: list[str] = Field(default_factory=list)
    unknown_flags: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)


# ------------------------------------------------------------------------ candidates


_NEGATED: dict[type, type] = {
    ast.Gt: ast.LtE,
    ast.GtE: ast.Lt,
    ast.Lt: ast.GtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


def _constants(require: str) -> list[tuple[str, object]]:
    """(attr, value) pairs that ``require`` compares ``args.X`` with and would accept.

    ``not (args.x > 1)`` is read as ``args.x <= 1`` (negations are pushed inward);
    comparisons under ``or``/``and`` are all offered, each is verified anyway. A bare
    ``args.x`` asks for a true value (``not args.x`` for a false one): offered as
    ``True``/``False``, which :func:`card_candidates` keeps for on/off flags only.
    """
    try:
        tree = ast.parse(require, mode="eval").body
    except SyntaxError:
        return []
    out: list[tuple[str, object]] = []

    def visit(node: ast.AST, negated: bool) -> None:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            visit(node.operand, not negated)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "args"
        ):
            out.append((node.attr, not negated))
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                visit(v, negated)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            op = node.ops[0]
            if negated:
                op = _NEGATED.get(type(op), type(op))()
            _accept(node.left, op, node.comparators[0])
        elif isinstance(node, ast.IfExp):
            visit(node.body, negated)
            visit(node.orelse, negated)

    def _accept(left: ast.AST, op: ast.cmpop, right: ast.AST) -> None:
        if not (
            isinstance(left, ast.Attribute)
            and isinstance(left.value, ast.Name)
            and left.value.id == "args"
        ):
            return
        attr = left.attr
        if isinstance(right, ast.Constant) and right.value is not None:
            v = right.value
            number = v if isinstance(v, int) and not isinstance(v, bool) else None
            if isinstance(op, (ast.Eq, ast.LtE, ast.GtE)):
                out.append((attr, v))
            elif isinstance(op, ast.Gt) and number is not None:
                out.append((attr, number + 1))
            elif isinstance(op, ast.Lt) and number is not None:
                out.append((attr, number - 1))
        elif isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
            out.extend(
                (attr, e.value)
                for e in right.elts[:3]
                if isinstance(e, ast.Constant) and e.value is not None
            )

    visit(tree, False)
    return list(dict.fromkeys(out))


#: An unchecked edit: (attribute -> value to set, attributes to remove, where it came from).
Candidate = tuple[dict[str, Any], list[str], str]


def card_candidates(card: Card, user_set: set[str], catalog: Catalog) -> list[Candidate]:
    """Unchecked ``(set, remove, origin)`` edits (attribute keys) that may satisfy ``card``,
    most likely first: its ``fix_hints``, dropping a flag of ``user_set`` its ``require``
    reads, a value ``require`` accepts, dropping a flag its ``when`` reads."""
    by_attr, by_flag = catalog.by_attr(), catalog.by_flag()

    def attr_of(key: str) -> str:
        spec = by_flag.get(key) if key.startswith("-") else None
        return spec.attr if spec is not None else key

    out: list[Candidate] = []
    if not card.fix_hints.empty():
        out.append(
            (
                {attr_of(k): v for k, v in card.fix_hints.set.items()},
                [attr_of(k) for k in card.fix_hints.remove],
                "card fix_hints",
            )
        )
    user_set = {a for a in user_set if a not in _KEEP and not _required(a, by_attr)}
    req_reads = sorted(_reads(card.require))
    for attr in req_reads:
        if attr in user_set:
            out.append(({}, [attr], "drop a flag the card requires"))
    for attr, value in _constants(card.require):
        spec = by_attr.get(attr)
        if spec is not None and (
            not isinstance(value, bool) or spec.action in ("store_true", "store_false")
        ):
            out.append(({attr: value}, [], "a value the card accepts"))
    for attr in sorted(_reads(card.when) - set(req_reads)):
        if attr in user_set:
            out.append(({}, [attr], "drop a flag that enables the card"))
    seen: set[str] = set()
    unique: list[Candidate] = []
    for s, r, origin in out:
        key = repr((sorted((k, repr(v)) for k, v in s.items()), sorted(r)))
        if key not in seen:
            seen.add(key)
            unique.append((s, r, origin))
    return unique[:MAX_CANDIDATES]


_KEEP = frozenset({"model_path", "tokenizer_path"})


def _required(attr: str, by_attr: dict[str, Any]) -> bool:
    spec = by_attr.get(attr)
    return bool(spec is not None and spec.required)


def _reads(text: str) -> set[str]:
    try:
        return set(referenced_names(text))
    except Exception:  # a card that cannot be read offers no candidates
        return set()


def _spell(key: str, catalog: Catalog) -> str:
    spec = catalog.by_attr().get(key)
    return spec.flags[0] if spec is not None and not key.startswith("-") else key


# ----------------------------------------------------------------------------- lint


class _Ctx:
    def __init__(
        self, store: Store, release: str, catalog: Catalog, facts: dict[str, Value], prefix: str
    ) -> None:
        self.store, self.release, self.catalog, self.facts = store, release, catalog, facts
        self.prefix = prefix

    def results(self, argv: list[str]) -> tuple[list[CardResult], frozenset[str], set[str]]:
        attrs, parsed = prepare_flags(self.store, self.release, argv, self.catalog)
        results = evaluate_cards(self.store, self.release, attrs, self.facts, parsed)
        return (
            results,
            baseline_violations(self.store, self.release, attrs, self.facts),
            set(parsed.values),
        )


def _try_fix(
    ctx: _Ctx,
    card: Card,
    argv: list[str],
    before_bad: set[str],
    s: dict[str, Any],
    r: list[str],
    origin: str,
) -> LintFix | None:
    try:
        new_argv = apply_edits(argv, ctx.catalog, set=dict(s), remove=list(r))
    except KeyError:
        return None
    if new_argv == argv:
        return None
    results, background, _ = ctx.results(new_argv)
    by_id = {x.card.id: x for x in results}
    after = by_id.get(card.id)
    card_after = after.verdict if after is not None else "not_applicable"
    trips = [
        x.card.id
        for x in results
        if x.verdict == "violated"
        and x.card.severity == "error"
        and x.card.id not in before_bad
        and x.card.id not in background
        and x.card.id != card.id
    ]
    verified = card_after in ("satisfied", "not_applicable") and not trips
    if trips:
        t = by_id[trips[0]].card
        note = f"fixes this card, but then {t.id} fails: {t.title}"
    elif not verified:
        note = f"the card is still {card_after} after this edit"
    else:
        note = "the card holds and no other error card of this release is violated"
    return LintFix(
        set={_spell(k, ctx.catalog): jsonable(v) for k, v in s.items()},
        remove=[_spell(k, ctx.catalog) for k in r],
        argv=new_argv,
        command=render_command(new_argv, prefix=ctx.prefix),
        origin=origin,
        verified=verified,
        card_after=card_after,
        trips=trips,
        note=note,
    )


def _finding(res: CardResult, release: str) -> LintFinding:
    card = res.card
    verdict = res.verdict
    if verdict != "violated" and verdict != "unknown":
        raise ValueError(f"card {card.id} is {verdict}: not a finding")
    return LintFinding(
        rule=card.id,
        title=card.title,
        verdict=verdict,
        severity=card.severity,
        origin=card.origin,
        message=card.message,
        reason=res.reason,
        unknowns=res.unknowns,
        citations=card.citations_for(release),
    )


def lint(
    store: Store,
    release: str,
    argv: list[str],
    hardware: str | None = None,
    model_arch: str | None = None,
    *,
    env: dict[str, str] | None = None,
    prefix: str = "python -m sglang.launch_server",
) -> LintReport:
    """Check ``argv`` (flags only) on ``release``; see the module docstring."""
    t0 = time.perf_counter()
    catalog = load_catalog(store, release)
    argv = [str(a) for a in argv]
    _, parsed0 = prepare_flags(store, release, argv, catalog)
    model_path = parsed0.values.get("model_path")
    model = str(model_path.value) if model_path is not None else None
    arch = model_arch or model_arch_for(model)
    facts = facts_for(hardware, arch, model, env)
    ctx = _Ctx(store, release, catalog, facts, prefix)
    results, background, user_set = ctx.results(argv)
    timings = {"check": round((time.perf_counter() - t0) * 1000, 2)}
    counts: dict[str, int] = {}
    for x in results:
        counts[x.verdict] = counts.get(x.verdict, 0) + 1
    violated = [x for x in results if x.verdict == "violated" and x.card.id not in background]
    violated.sort(key=lambda x: (x.card.severity != "error", x.card.origin != "curated", x.card.id))
    before_bad = {x.card.id for x in violated if x.card.severity == "error"}
    report = LintReport(
        release=release,
        hardware=hardware,
        model_arch=arch,
        argv=argv,
        command=render_command(argv, prefix=prefix),
        ok=not before_bad,
        counts=counts,
        parse_errors=list(parsed0.errors),
        unknown_flags=list(parsed0.unknown),
        background=[
            _finding(x, release)
            for x in results
            if x.verdict == "violated" and x.card.id in background
        ],
        unknown=[
            _finding(x, release)
            for x in results
            if x.verdict == "unknown" and (x.card.reads & user_set or x.card.uses_given)
        ],
    )
    t1 = time.perf_counter()
    for i, x in enumerate(violated):
        finding = _finding(x, release)
        if i < MAX_FIXED_FINDINGS:
            fixes = [
                f
                for s, r, origin in card_candidates(x.card, user_set, catalog)
                if (f := _try_fix(ctx, x.card, argv, before_bad, s, r, origin)) is not None
            ]
            fixes.sort(
                key=lambda f: (
                    not f.verified,
                    f.card_after == "violated",
                    len(f.trips),
                    _ORIGIN_RANK.get(f.origin, 3),
                    len(f.set) + len(f.remove),
                )
            )
            finding.fixes = fixes[:MAX_FIXES]
        report.violated.append(finding)
    timings["fixes"] = round((time.perf_counter() - t1) * 1000, 2)
    timings["total"] = round((time.perf_counter() - t0) * 1000, 2)
    report.timings_ms = timings
    return report
