"""The rule a bare check enforces, in one plain sentence.

A bare ``assert`` tells the user nothing; its condition and the guards that lead
to it are the whole rule. :func:`rule_sentence` renders them, word for word:

* the guards become "when …" clauses (a guard that must be false is negated, with
  De Morgan's laws for ``and``/``or``), the assert's test becomes what "must" hold;
* ``x is None`` / ``x is not None`` → "is not set" / "is set" (required: "must be unset"); ``==``/``!=`` → "is"/"is
  not"; ``<``, ``<=``, ``>``, ``>=`` → "less than", "at most", "more than", "at least";
  ``x in (...)`` → "one of …"; ``a % b == 0`` → "divisible by"; a bare operand → "is
  set" (a flag) or "is true";
* ``self.X`` (and ``server_args.X``, ``getattr(self, "X")`` …) → the flag's spelling,
  the one the user typed when they typed one (``spellings``), else the catalog's first;
* facts get readable names: ``model_arch`` → "the model architecture",
  ``….hf_config.X`` → "the model config's `X`", ``envs.X.get()`` → "the environment
  variable `X`".

Anything it has no words for is shown as code with the flags named in it
(``parse_connector_type(--model-path)``); nothing is added that the condition does
not say. The sentence ends with the check's ``release:path:line`` citation.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.conditions import DEFAULT_ARG_OBJECTS
from service.engine.explain.naming import (
    ATTR_TEXT,
    Namer,
    flag_attr,
    items_text,
    literal,
    subject_text,
    value_text,
)
from service.engine.flags.parse import ParsedArgs


@dataclass(frozen=True)
class _Pred:
    """``subject`` + a verb phrase, as a statement (``is_``) and as a requirement (``must``)."""

    subject: str
    is_: str
    must: str

    def state(self) -> str:
        return f"{self.subject} {self.is_}"

    def require(self) -> str:
        return f"{self.subject} {self.must}"


# ----------------------------------------------------------------------------- predicates

_ORDER = {
    ast.Lt: ("less than", "at least"),
    ast.LtE: ("at most", "more than"),
    ast.Gt: ("more than", "at most"),
    ast.GtE: ("at least", "less than"),
}
_FLIP = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}


def _pair(pos_is: str, neg_is: str, pos_must: str, neg_must: str, subject: str, neg: bool) -> _Pred:
    return _Pred(subject, neg_is, neg_must) if neg else _Pred(subject, pos_is, pos_must)


def _compare(left: ast.AST, op: ast.cmpop, right: ast.AST, namer: Namer, neg: bool) -> _Pred:
    swap = (
        isinstance(left, ast.Constant)
        and not isinstance(right, ast.Constant)
        and not isinstance(op, ast.In | ast.NotIn)
    )
    if swap:
        left, right = right, left
        op = _FLIP.get(type(op), type(op))()
    if isinstance(op, ast.NotEq | ast.IsNot | ast.NotIn):
        neg = not neg
        op = {ast.NotEq: ast.Eq, ast.IsNot: ast.Is, ast.NotIn: ast.In}[type(op)]()
    if isinstance(op, ast.Eq | ast.Is) and isinstance(right, ast.Constant) and right.value is None:
        return _pair(
            "is not set", "is set", "must be unset", "must be set", subject_text(left, namer), neg
        )
    if (
        isinstance(op, ast.Eq)
        and isinstance(right, ast.Constant)
        and right.value == 0
        and isinstance(left, ast.BinOp)
        and isinstance(left.op, ast.Mod)
    ):
        div = f"divisible by {value_text(left.right, namer)}"
        return _pair(
            f"is {div}",
            f"is not {div}",
            f"must be {div}",
            f"must not be {div}",
            subject_text(left.left, namer),
            neg,
        )
    if isinstance(op, ast.Eq | ast.Is):
        v = value_text(right, namer)
        return _pair(
            f"is {v}",
            f"is not {v}",
            f"must be {v}",
            f"must not be {v}",
            subject_text(left, namer),
            neg,
        )
    if isinstance(op, ast.In):
        if isinstance(right, ast.List | ast.Tuple | ast.Set) and right.elts:
            vals = [value_text(e, namer) for e in right.elts]
            one = "one of " + items_text(vals) if len(vals) > 1 else vals[0]
            return _pair(
                f"is {one}",
                f"is not {one}",
                f"must be {one}",
                f"must not be {one}",
                subject_text(left, namer),
                neg,
            )
        if isinstance(left, ast.Constant):
            v = value_text(left, namer)
            return _pair(
                f"contains {v}",
                f"does not contain {v}",
                f"must contain {v}",
                f"must not contain {v}",
                subject_text(right, namer),
                neg,
            )
        where = value_text(right, namer)
        return _pair(
            f"is in {where}",
            f"is not in {where}",
            f"must be in {where}",
            f"must not be in {where}",
            subject_text(left, namer),
            neg,
        )
    pos, negw = _ORDER[type(op)]
    v = value_text(right, namer)
    return _pair(
        f"is {pos} {v}",
        f"is {negw} {v}",
        f"must be {pos} {v}",
        f"must be {negw} {v}",
        subject_text(left, namer),
        neg,
    )


def _truthy(node: ast.AST, namer: Namer, neg: bool) -> _Pred:
    attr = flag_attr(node, namer)
    if attr is not None and namer.is_switch(attr):
        return _pair(
            "is set", "is not set", "must be set", "must not be set", namer.flag(attr), neg
        )
    if attr is not None:
        return _pair(
            "is non-zero and non-empty",
            "is zero or empty",
            "must be non-zero and non-empty",
            "must be zero or empty",
            namer.flag(attr),
            neg,
        )
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.args
        and node.func.attr in ("startswith", "endswith")
    ):
        how = "starts" if node.func.attr == "startswith" else "ends"
        v = value_text(node.args[0], namer)
        return _pair(
            f"{how} with {v}",
            f"does not {how[:-1]} with {v}",
            f"must {how[:-1]} with {v}",
            f"must not {how[:-1]} with {v}",
            subject_text(node.func.value, namer),
            neg,
        )
    return _pair(
        "is true", "is false", "must be true", "must be false", subject_text(node, namer), neg
    )


# ----------------------------------------------------------------------------- composition


@dataclass(frozen=True)
class _Junction:
    """``and`` / ``or`` of sub-rules (already negated where needed)."""

    kind: str  # "and" | "or"
    parts: tuple[_Pred | _Junction, ...]


_Rule = _Pred | _Junction


def _rule(node: ast.AST, namer: Namer, neg: bool = False) -> _Rule:
    """The condition as predicates joined by and/or, with ``not`` pushed down to the leaves."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _rule(node.operand, namer, not neg)
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And) != neg  # De Morgan
        parts: list[_Rule] = []
        for value in node.values:
            sub = _rule(value, namer, neg)
            kind = "and" if is_and else "or"
            parts.extend(sub.parts if isinstance(sub, _Junction) and sub.kind == kind else [sub])
        return _Junction("and" if is_and else "or", tuple(parts))
    if isinstance(node, ast.Compare):
        pairs = list(zip([node.left, *node.comparators], node.comparators, strict=False))
        preds = [_compare(a, op, b, namer, neg) for (a, b), op in zip(pairs, node.ops, strict=True)]
        if len(preds) == 1:
            return preds[0]
        return _Junction("or" if neg else "and", tuple(preds))
    return _truthy(node, namer, neg)


def _group(parts: Iterable[_Rule], phrase: str) -> list[tuple[list[str], str, _Rule]]:
    """Consecutive predicates sharing a verb phrase, grouped: ``[(subjects, phrase, first)]``."""
    out: list[tuple[list[str], str, _Rule]] = []
    for p in parts:
        if not isinstance(p, _Pred):
            out.append(([], "", p))
            continue
        key: str = getattr(p, phrase)
        if out and key and out[-1][1] == key and p.subject not in out[-1][0]:
            out[-1][0].append(p.subject)
        else:
            out.append(([p.subject], key, p))
    return out


def _join(items: list[str], word: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    sep = "; " if any("," in i for i in items) else ", "
    return f"{sep.join(items[:-1])}{sep.rstrip() if len(items) > 2 else ''} {word} {items[-1]}"


def _words(rule: _Rule, require: bool, nested: bool = False) -> str:
    phrase = "must" if require else "is_"
    if isinstance(rule, _Pred):
        return rule.require() if require else rule.state()
    texts: list[str] = []
    for subjects, key, first in _group(rule.parts, phrase):
        if len(subjects) > 1:
            both = (
                "both "
                if len(subjects) == 2
                and rule.kind == "and"
                and require
                and key.startswith("must be ")
                else ""
            )
            verb = (
                key.replace("must ", f"must {both}", 1)
                if require
                else key.replace("is ", "are ", 1).replace("does ", "do ", 1)
            )
            texts.append(
                f"{_join(subjects, rule.kind)} {verb}"
                if rule.kind == "and"
                else f"either {_join(subjects, 'or')} {key}"
            )
        else:
            texts.append(_words(first, require, nested=True))
    text = _join(texts, rule.kind)
    if rule.kind == "or" and len(texts) > 1 and not text.startswith("either "):
        text = f"either {text}"
    return f"({text})" if nested and len(texts) > 1 else text


def _parse(text: str) -> ast.expr | None:
    try:
        return ast.parse(" ".join(text.split()), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def words(
    condition: str, namer: Namer | None = None, *, require: bool = False, negate: bool = False
) -> str:
    """``condition`` in words: a statement ("`--x` is not set") or, with ``require``, what
    must hold ("`--x` must be unset"); ``negate`` says it of ``not (condition)``.

    Text that does not parse is shown as it is, with ``self.x`` replaced by the flag.
    """
    namer = namer or Namer()
    node = _parse(condition)
    if node is None:
        code = ATTR_TEXT.sub(lambda m: namer.bare_flag(m.group(1)), " ".join(condition.split()))
        return f"{'not ' if negate else ''}`{code}`" + (" must hold" if require else "")
    return _words(_rule(node, namer, negate), require)


def arg_roots(check: Check) -> tuple[str, ...]:
    """The names that stand for SGLang's server arguments in ``check``: ``server_args``,
    ``args``, ``cfg``, ``sa`` (and views of them), plus ``self`` inside a ``ServerArgs``
    method; none in ``multimodal_gen``, whose server arguments are another class."""
    if "multimodal_gen" in check.path:
        return ()
    roots = tuple(r for r in DEFAULT_ARG_OBJECTS if r != "self")
    cls = check.function.rpartition(".")[0]
    return (*roots, "self") if cls.endswith("ServerArgs") else roots


def rule_sentence(
    check: Check,
    release: str,
    catalog: Catalog | None = None,
    *,
    spellings: Mapping[str, str] | None = None,
    citation: str | None = None,
) -> str | None:
    """The rule ``check`` enforces, in one sentence (None when there is nothing to say).

    An assert: "In 0.5.11, when <guards>, <its test as a requirement>; otherwise the
    assert at <citation> fails." A raise (or an assert with no test): "In 0.5.11, the
    server refuses to start when <guards> (<citation>)."
    """
    namer = Namer(catalog, spellings, arg_roots(check))
    where = citation or f"{release}:{check.path}:{check.start_line}"
    whens: list[str] = []
    for g in check.guards:
        text = words(str(g.get("condition") or ""), namer, negate=not g.get("polarity", True))
        if text and text not in whens:
            whens.append(text)
    cond = (check.condition or "").strip()
    if check.kind == "assert" and cond:
        need = words(cond, namer, require=True)
        joined = _join(whens, "and")
        when = f"when {joined}, {'then ' if ';' in joined else ''}" if whens else ""
        return f"In {release}, {when}{need}; otherwise the assert at `{where}` fails."
    if not whens:
        return None
    exc = check.exc_type or "an error"
    return f"In {release}, the server refuses to start ({exc} at `{where}`) when {_join(whens, 'and')}."


__all__ = ["Namer", "arg_roots", "literal", "plain_rule", "rule_sentence", "words"]


def plain_rule(
    check: Check, version: str, catalog: Catalog, pargs: ParsedArgs, citation: str
) -> str | None:
    """The rule a bare (or message-less) check enforces in one sentence, flags spelled as the
    user typed them (:func:`~service.engine.explain.rule.rule_sentence`); None for a check
    whose message already says it."""
    if not (check.bare or not check.message):
        return None
    spellings = {attr: pf.flag or pf.token for attr, pf in pargs.values.items()}
    return rule_sentence(check, version, catalog, spellings=spellings, citation=citation)
