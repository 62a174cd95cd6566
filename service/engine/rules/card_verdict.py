"""One rule card's verdict under an attribute environment (:func:`judge_card`).

* ``violated``       ``when`` is true and ``require`` is false;
* ``not_applicable`` ``when`` is false (``require`` is then not evaluated: a card that
  does not apply reads nothing its ``require`` names);
* ``satisfied``      ``when`` is not false and ``require`` is true;
* ``unknown``        anything else; the reason names the unknown inputs.

``when`` is evaluated operand by operand, innermost guard first, stopping at the first false
one. The :class:`CardResult` keeps the inputs the evaluations read, for the explanation. A
``not_applicable`` verdict rests on a false operand alone (:attr:`CardResult.operand`), and
any environment where that operand is false gives it, whatever the others say: it keeps no
inputs and no notes, so that it is the same however it was reached.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from kb.errors import UnsafeExpression
from kb.rules.cards import Card
from service.engine.answer import RuleVerdict, jsonable
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Result, evaluate
from service.engine.flags.parse import ParsedArgs

__all__ = ["CardResult", "Verdict", "given_function", "judge_card", "shown_detail", "when_operands"]

Verdict = Literal["violated", "satisfied", "unknown", "not_applicable"]


@dataclass
class CardResult:
    """A card's verdict with the evaluations behind it."""

    card: Card
    verdict: Verdict
    reason: str
    unknowns: list[str] = field(default_factory=list)
    inputs: list[tuple[str, object, str]] = field(default_factory=list)  # name, value, detail
    notes: list[str] = field(default_factory=list)
    #: a ``not_applicable`` verdict's false ``when`` operand (its whole reason)
    operand: str = ""

    def as_rule_verdict(self) -> RuleVerdict:
        return RuleVerdict(
            rule=self.card.id, verdict=self.verdict, severity=self.card.severity, reason=self.reason
        )


def given_function(parsed: ParsedArgs) -> tuple[Callable[[object], object], tuple[str, ...]]:
    typed = {pf.flag or pf.token for pf in parsed.values.values()}
    typed |= {pf.token for pf in parsed.values.values()}

    def given(flag: object) -> object:
        return isinstance(flag, str) and flag in typed

    return given, tuple(sorted(typed))


def shown_detail(prov: Provenance) -> str:
    """How a verdict's inputs show a value's provenance."""
    return f"{prov.kind}: {prov.detail}" if prov.detail else prov.kind


def _inputs(results: list[Result]) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = []
    seen: set[str] = set()
    for res in results:
        for atom in res.atoms:
            for name, value, prov in atom.inputs:
                if name not in seen:
                    seen.add(name)
                    out.append((name, value, shown_detail(prov)))
    return out


def _describe(inputs: list[tuple[str, object, str]], limit: int = 5) -> str:
    shown = [f"{n}={jsonable(v)!r} ({d})" for n, v, d in inputs if v is not UNKNOWN][:limit]
    return "; ".join(shown)


@functools.lru_cache(maxsize=16384)
def when_operands(text: str) -> tuple[str, ...]:
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
    for part in when_operands(card.when):
        res = evaluate(part, env)
        results.append(res)
        if res.truth is False:
            return False, results
        if res.truth is UNKNOWN:
            truth = UNKNOWN
    return truth, results


def judge_card(card: Card, env: Env, notes: list[str]) -> CardResult:
    """The card's verdict under ``env``. ``notes`` (caveats about the inputs, such as
    "`attr` may be changed at path:line when …") may grow while the card is evaluated;
    the result keeps three, one about an unknown input first when the verdict is unknown
    (its reason quotes that one), except a ``not_applicable`` one, which keeps none."""
    result, undecided = _judge(card, env, notes)
    if result.verdict == "not_applicable":
        return result
    lead = _lead_note(notes, result.unknowns) if undecided else None
    result.notes = [*([lead] if lead else []), *(n for n in notes if n is not lead)][:3]
    if lead:
        result.reason += "; " + lead
    return result


def _lead_note(notes: list[str], unknowns: list[str]) -> str | None:
    """The first note about one of ``unknowns`` (notes name their attribute first, in
    backquotes), else the first note."""
    heads = tuple(f"`{u}`" for u in unknowns)
    return next((n for n in notes if n.startswith(heads)), notes[0] if notes else None)


def _judge(card: Card, env: Env, notes: list[str]) -> tuple[CardResult, bool]:
    """The verdict, and whether it is unknown because inputs were (its reason then
    takes a note)."""
    try:
        w, parts = _when(card, env)
        if w is False:
            operand = when_operands(card.when)[len(parts) - 1]
            return CardResult(card, "not_applicable", "`when` is false", operand=operand), False
        req = evaluate(card.require, env)
        if req.truth is True:
            return CardResult(
                card, "satisfied", "`require` holds", [], _inputs([req]), notes
            ), False
    except UnsafeExpression as exc:
        why = f"unknown because the card could not be evaluated: {exc.message}"
        return CardResult(card, "unknown", why, [card.id], notes=notes), False
    r = req.truth
    inputs = _inputs([*parts, req])
    if w is True and r is False:
        why = _describe(_inputs([req])) or _describe(inputs)
        reason = f"{card.message} — `require` is false" + (f" with {why}" if why else "")
        return CardResult(card, "violated", reason, [], inputs, notes), False
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
    return CardResult(card, "unknown", reason, unknowns, inputs, notes), True
