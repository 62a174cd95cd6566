"""Literal classes: an attribute read only through tests against literals, kept in a memo
record as the answers to those tests, so that the record serves every value answering
them alike (used by the rule cards, :mod:`~service.engine.rules.value_classes`).

A card such as ``kv_cache_dtype in ('fp8_e4m3', 'fp8_e5m2') and …`` gives one verdict for
``auto``, ``bf16`` and ``nvfp4`` alike: what it learns about the value is whether it equals
one of two literals. A fix candidate that sets a backend or a dtype to a
value no earlier command used would otherwise re-judge every card reading it.

A text uses attribute ``x`` *by tests* when every occurrence of ``<obj>.x`` in it is one of:

* its truth (the condition itself, the operand of ``not`` / ``and`` / ``or``, a ternary's
  test);
* compared with one literal (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``), on either
  side, or with ``None``, ``True`` or ``False`` by ``is`` / ``is not``;
* ``in`` / ``not in`` a literal tuple, list or set of literals, or the container of a
  literal text (``'fp8' in x``);
* ``x.startswith(…)`` / ``x.endswith(…)`` with a literal text or a tuple of them;
* an element of a literal's container (``'a' in (x, y)``) or of a tuple compared with a
  tuple of literals (``(x, y) != (1, 1)``);
* a leaf of a ternary or ``and`` / ``or`` (``(x or y) in (None, 'fa3')``), the whole used
  for its truth or tested as above, or compared (``==``, ``!=``) with another such
  expression whose every leaf is ``x`` or a literal (``('a' if x == 'auto' else x) !=
  x``): each literal is a test.

A write to ``x`` keeps ``x`` read by tests only when its value is always ``x`` itself
or a literal (``x = 'a' if x == 'auto' else x``, ``x = x or 'a'``), each literal a test
of its own: the folded ``x`` is then the value given or a literal the tests tell apart.
Any other occurrence (an argument of a call, arithmetic, a copy into another
attribute, a comparison with another attribute, a local or a text of that name) keeps the
exact value.
The *signature* of a value under a set of tests is its type, its truth and each test's
answer, computed as the interpreter computes them (Python's operators); values of other
types than text, number, ``bool`` or ``None`` are their own class.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kb.conditions import to_node
from kb.errors import UnsafeExpression
from service.engine.expr.interpreter import Value

__all__ = [
    "Tests",
    "answers_signature",
    "parents_of",
    "read_by_tests",
    "truth_only",
    "uses_of",
]

#: the tests a value is read through, sorted: ``(kind, literal)``
Tests = tuple[tuple[str, object], ...]
#: per attribute named in a text: its tests, or ``None`` when it is read another way
Uses = Mapping[str, Tests | None]

_LITERAL = (str, int, float, bool, type(None))
_TESTS: dict[str, Callable[[Any, Any], object]] = {
    "eq": operator.eq,
    "lt": operator.lt,
    "gt": operator.gt,
    "is": operator.is_,
    "has": lambda v, c: c in v,
    "sw": lambda v, c: v.startswith(c),
    "ew": lambda v, c: v.endswith(c),
}


def parents_of(root: ast.AST) -> dict[int, ast.AST]:
    """``id`` of each node under ``root`` -> its parent."""
    parents: dict[int, ast.AST] = {}
    for p in ast.walk(root):
        for c in ast.iter_child_nodes(p):
            parents[id(c)] = p
    return parents


def truth_only(node: ast.AST, parents: dict[int, ast.AST], root: ast.AST | None) -> bool:
    """Is only ``node``'s truth used: it is the condition (``root``), the operand of a
    ``not``, the test of a ternary, or an operand of an ``and`` / ``or`` itself used so?"""
    if node is root:
        return True
    parent = parents.get(id(node))
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        return True
    if isinstance(parent, ast.IfExp):
        return parent.test is node
    return isinstance(parent, ast.BoolOp) and truth_only(parent, parents, root)


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, _LITERAL)


def _texts(node: ast.AST) -> tuple[str, ...] | None:
    """The literal texts of ``'a'`` or ``('a', 'b')``; ``None`` for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.Tuple) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def _compare_tests(node: ast.AST, cmp: ast.Compare) -> list[tuple[str, object]] | None:
    """The tests of ``node``'s value made by ``cmp`` (one operator; ``node`` on either
    side)."""
    if len(cmp.ops) != 1:
        return None
    op, left, right = cmp.ops[0], cmp.left, cmp.comparators[0]
    other = right if left is node else left
    if isinstance(op, ast.In | ast.NotIn):
        if left is node and isinstance(other, ast.Tuple | ast.List | ast.Set):
            if all(_literal(e) for e in other.elts):
                return [("eq", e.value) for e in other.elts]  # type: ignore[attr-defined]
            return None
        if right is node and isinstance(other, ast.Constant) and isinstance(other.value, str):
            return [("has", other.value)]
        return None
    if not _literal(other):
        return None
    value = other.value  # type: ignore[attr-defined]
    if isinstance(op, ast.Eq | ast.NotEq):
        return [("eq", value)]
    if isinstance(op, ast.Is | ast.IsNot):
        # identity is only stable for the singletons
        return [("is", value)] if value is None or isinstance(value, bool) else None
    ordered = isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE)
    if not ordered or isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    # x < c, x <= c, x > c, x >= c and c < x ... all follow from these three
    return [("lt", value), ("eq", value), ("gt", value)]


def _leaves(root: ast.AST) -> list[ast.AST]:
    """What the expression ``root`` may evaluate to: ``root``, or the leaves of a
    ternary's branches and of the operands of ``and`` / ``or``."""
    if isinstance(root, ast.IfExp):
        return [*_leaves(root.body), *_leaves(root.orelse)]
    if isinstance(root, ast.BoolOp):
        return [leaf for v in root.values for leaf in _leaves(v)]
    return [root]


def _self_write(root: ast.AST, target: str) -> tuple[set[int], list[tuple[str, object]]] | None:
    """For the value of a write to ``target``: (the ``id`` of each leaf that is ``target``
    itself, a test per literal leaf); ``None`` when a leaf is anything else, so that the
    folded value is not always the value given or a literal the tests tell apart."""
    mine: set[int] = set()
    tests: list[tuple[str, object]] = []
    for leaf in _leaves(root):
        if isinstance(leaf, ast.Attribute) and leaf.attr == target:
            mine.add(id(leaf))
        elif _literal(leaf):
            tests.append(("eq", leaf.value))  # type: ignore[attr-defined]
        else:
            return None
    return mine, tests


def _element_tests(
    node: ast.AST, seq: ast.List | ast.Tuple | ast.Set, parents: dict[int, ast.AST]
) -> list[tuple[str, object]] | None:
    """An element of a collection written out: ``'a' in (x, y)`` tests ``x == 'a'``;
    ``(x, y) == (1, 1)`` (or ``!=``) tests ``x == 1``; anything else is another use."""
    cmp = parents.get(id(seq))
    if not isinstance(cmp, ast.Compare) or len(cmp.ops) != 1:
        return None
    op, left, right = cmp.ops[0], cmp.left, cmp.comparators[0]
    if isinstance(op, ast.In | ast.NotIn) and right is seq and _literal(left):
        return [("eq", left.value)]  # type: ignore[attr-defined]
    other = right if left is seq else left
    if (
        isinstance(op, ast.Eq | ast.NotEq)
        and isinstance(seq, ast.Tuple)
        and isinstance(other, ast.Tuple)
        and len(other.elts) == len(seq.elts)
        and all(_literal(e) for e in other.elts)
    ):
        i = next(i for i, e in enumerate(seq.elts) if e is node)
        return [("eq", other.elts[i].value)]  # type: ignore[attr-defined]
    return None


def _tree_top(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    """The largest expression of which ``node`` is a leaf (see :func:`_leaves`)."""
    while True:
        parent = parents.get(id(node))
        if not (
            (isinstance(parent, ast.IfExp) and parent.test is not node)
            or isinstance(parent, ast.BoolOp)
        ):
            return node
        node = parent


def _same_tree(
    node: ast.Attribute, top: ast.AST, cmp: ast.Compare
) -> list[tuple[str, object]] | None:
    """``top == other`` / ``top != other``, both sides ``node``'s attribute or literals at
    every leaf (``(x if … else 'a') != x``): the literals are the tests."""
    if len(cmp.ops) != 1 or not isinstance(cmp.ops[0], ast.Eq | ast.NotEq):
        return None
    tests: list[tuple[str, object]] = []
    for side in (cmp.left, cmp.comparators[0]):
        own = _self_write(side, node.attr)
        if own is None:
            return None
        tests.extend(own[1])
    return tests


def _use_tests(
    node: ast.Attribute, parents: dict[int, ast.AST], root: ast.AST | None
) -> list[tuple[str, object]] | None:
    """The tests this occurrence reads its attribute through; ``None``: another use.
    (``root``: the text's root when it is a condition.)"""
    if truth_only(node, parents, root):
        return []
    top = _tree_top(node, parents)  # the value of ``top`` is that of one of its leaves
    parent = parents.get(id(top))
    if isinstance(parent, ast.Compare):
        tests = _compare_tests(top, parent)
        return tests if tests is not None else _same_tree(node, top, parent)
    if top is not node:
        return [] if truth_only(top, parents, root) else None
    if isinstance(parent, ast.List | ast.Tuple | ast.Set):
        return _element_tests(node, parent, parents)
    if isinstance(parent, ast.Attribute) and parent.attr in ("startswith", "endswith"):
        call = parents.get(id(parent))
        if isinstance(call, ast.Call) and call.func is parent and len(call.args) == 1:
            texts = _texts(call.args[0])
            if texts is not None and not call.keywords:
                kind = "sw" if parent.attr == "startswith" else "ew"
                return [(kind, t) for t in texts]
    return None


@functools.lru_cache(maxsize=65536)
def _text_uses(text: str, target: str | None) -> Mapping[str, Tests | None]:
    try:
        root = to_node(text, whitelist=False)
    except (UnsafeExpression, SyntaxError, ValueError, RecursionError):
        return {}  # the interpreter cannot parse it either: it reads nothing
    parents = parents_of(root)
    found: dict[str, set[tuple[str, object]] | None] = {}
    exact: set[str] = set()
    mine: set[int] = set()
    if target is not None:
        own = _self_write(root, target)
        if own is None:
            exact.add(target)
        else:  # written back to itself: the fold gives the value as it came, or a literal
            mine = own[0]
            found[target] = set(own[1])
    for n in ast.walk(root):
        if isinstance(n, ast.Attribute):
            tests = (
                [] if id(n) in mine else _use_tests(n, parents, root if target is None else None)
            )
            if tests is None:
                exact.add(n.attr)
            else:
                got = found.setdefault(n.attr, set())
                if got is not None:
                    got.update(tests)
        elif isinstance(n, ast.Name):
            exact.add(n.id)  # a local of an attribute's name: its origin is not known here
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            exact.add(n.value)  # getattr(args, "x") and the like
    out: dict[str, Tests | None] = {k: _sorted(v) for k, v in found.items() if v is not None}
    out.update(dict.fromkeys(exact))
    return out


def _sorted(tests: Iterable[tuple[str, object]]) -> Tests:
    return tuple(sorted(set(tests), key=lambda t: (t[0], type(t[1]).__name__, repr(t[1]))))


def uses_of(texts: Iterable[tuple[str, str | None]]) -> dict[str, Tests | None]:
    """Per attribute the ``texts`` name: the tests they read it through, or ``None`` when
    one of them reads it another way. ``texts``: ``(text, None)`` for a condition,
    ``(text, attribute)`` for the value of a write to that attribute."""
    out: dict[str, Tests | None] = {}
    for text, target in texts:
        for name, tests in _text_uses(text, target).items():
            if name not in out:
                out[name] = tests
            else:
                prev = out[name]
                out[name] = None if prev is None or tests is None else _union(prev, tests)
    return out


@functools.lru_cache(maxsize=16384)
def _union(a: Tests, b: Tests) -> Tests:
    return a if a == b else _sorted((*a, *b))


def read_by_tests(uses: Iterable[Uses], names: Iterable[str]) -> dict[str, Tests]:
    """Of ``names``, those that some of ``uses`` (:func:`uses_of`) name and all that
    name them read by tests, each with all their tests."""
    uses = list(uses)
    out: dict[str, Tests] = {}
    for name in names:
        got: Tests | None = None  # a name no text spells was read another way
        for u in uses:
            if name not in u:
                continue
            tests = u[name]
            if tests is None:
                got = None
                break
            got = tests if got is None else _union(got, tests)
        if got is not None:
            out[name] = got
    return out


def _answer(kind: str, raw: object, literal: object) -> object:
    try:
        return bool(_TESTS[kind](raw, literal))
    except Exception:  # incomparable types: the interpreter's answer is unknown
        return None


def answers_signature(v: Value | None, tests: Tests) -> object:
    """The memo view of ``v`` under ``tests``: its type, truth and each test's answer
    (``"?"`` when absent; the exact value when of another type than a literal's)."""
    if v is None:
        return "?"
    raw = v.value
    if not isinstance(raw, _LITERAL):
        return ("exact", repr(raw))
    return (
        type(raw).__name__,
        bool(raw),
        tuple(_answer(kind, raw, literal) for kind, literal in tests),
    )
