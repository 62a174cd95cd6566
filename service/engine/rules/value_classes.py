"""Value classes: when a card's verdict depends on a model path only through tests that
many paths answer alike, its record serves every path of the class.

Almost every derived card of 0.5.2x starts with SGLang's guard
``not args.model_path.lower() in ['none', 'dummy']``, and a log's model path is new to
the service nearly every time. Its exact value in a card's recorded reads
(:mod:`~service.engine.rules.attr_reads`) would make every never-seen path re-judge
every card that reads it. Here a card's record keeps the *class* of each path of
:data:`CLASSED` instead (``None``, ``"none"``, ``"dummy"`` or any other text, how it was
given, and which other paths of :data:`CLASSED` it equals) whenever every text the
evaluation ran (``when``, ``require`` and the writes of the slices folded in for them)
uses the path only in ways the class decides:

* ``<args>.model_path.lower() in / not in`` a literal collection of ``"none"`` /
  ``"dummy"``;
* ``<args>.model_path is / is not None``, or its truth (``if cfg.speculative_draft_model_path:``);
* compared (``==``, ``!=``, ``in``, ``not in``) with another path of :data:`CLASSED`,
  alone or in a literal tuple or list with ``None``;
* as an argument of a call to a plain function name that the interpreter does not
  compute (neither a builtin nor a card helper): such a call is a fact looked up by its
  *text*, whatever the value;
* copied whole into another path of :data:`CLASSED` by a folded write. A folded write
  that gives such a path any other value keeps every path exact, except a call of a plain
  function name the interpreter does not compute (``resolve_hf_gguf_reference(...)``), or
  a local, that finds no fact under its text: the path is then unknown, whatever the typed ones.
  So a folded path is always a copy of a typed one, ``None`` or unknown.

Any other use (a copy into another attribute, a comparison with anything else, a string
method, a builtin) keeps the exact value. A verdict served to another member of the class
is :func:`rebased`: its inputs show the new paths, and a verdict whose reason or notes
quote an old path is not served at all.
"""

from __future__ import annotations

import ast
import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import replace

from kb.conditions import DEFAULT_ARG_OBJECTS, norm_text, to_node
from kb.errors import UnsafeExpression
from kb.rules.cards import helper_reads
from service.engine.evaluate.fold_slice import Slice
from service.engine.expr.interpreter import Value
from service.engine.expr.trace import Reads, answered_absent
from service.engine.expr.values import BUILTINS
from service.engine.rules.card_env import CARD_FUNCTIONS
from service.engine.rules.card_verdict import CardResult

__all__ = [
    "CLASSED",
    "CLASS_MARK",
    "Origin",
    "card_classed",
    "class_signature",
    "folds_classed",
    "origin_of",
    "rebased",
    "uses_by_class",
]

#: the attributes read by class when a card allows it
CLASSED = frozenset({"model_path", "speculative_draft_model_path"})
#: suffix of a recorded read's key when the read is of the attribute's class
CLASS_MARK = "#class"
#: the raw values of the classed attributes a record was made with
Origin = tuple[tuple[str, object], ...]
_SPECIAL = frozenset({"none", "dummy"})
#: calls the interpreter computes from their arguments' values
_COMPUTED = frozenset({*BUILTINS, *CARD_FUNCTIONS, "getattr", "hasattr", "isinstance"})
_COMPUTED |= {"bool", "any", "all", "given"}


def _raw(v: Value | None) -> object:
    return None if v is None else v.value


def class_signature(attrs: Mapping[str, Value], name: str) -> object:
    """The memo view of the classed attribute ``name`` of ``attrs``: its class, how it was
    given (the value spelled ``<v>`` in the provenance) and the other classed attributes
    equal to it; ``"?"`` when absent. A value of another type than text or ``None`` is
    its own class."""
    v = attrs.get(name)
    if v is None:
        return "?"
    raw = v.value
    if raw is None:
        cls: object = None
    elif isinstance(raw, str):
        low = raw.lower()
        cls = low if low in _SPECIAL or not raw else "*"  # "" is false, the rest true
    else:
        return ("exact", repr(raw), v.provenance.kind, v.provenance.detail)
    detail = v.provenance.detail
    if isinstance(raw, str) and raw and detail:
        detail = detail.replace(raw, "<v>")
    same = tuple(o for o in sorted(CLASSED) if o != name and _raw(attrs.get(o)) == raw)
    return ("class", cls, v.provenance.kind, detail, same)


def _classed_read(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in CLASSED


def _none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _literal_specials(node: ast.expr) -> bool:
    return isinstance(node, ast.List | ast.Tuple | ast.Set) and all(
        isinstance(e, ast.Constant) and e.value in _SPECIAL for e in node.elts
    )


def _paths_or_none(node: ast.expr) -> bool:
    """A classed read, or a literal tuple / list of classed reads and ``None``."""
    if _classed_read(node):
        return True
    return isinstance(node, ast.List | ast.Tuple) and all(
        _classed_read(e) or _none(e) for e in node.elts
    )


def _compares_paths(cmp: ast.Compare) -> bool:
    """``a == b``, ``a != b``, ``a in (None, b)``, ``a not in (b, None)``: classed reads
    only (and ``None`` inside the collection)."""
    if len(cmp.ops) != 1 or not _classed_read(cmp.left):
        return False
    op, right = cmp.ops[0], cmp.comparators[0]
    if isinstance(op, ast.Eq | ast.NotEq):
        return _classed_read(right)
    return isinstance(op, ast.In | ast.NotIn) and _paths_or_none(right)


def _truth_only(node: ast.AST, parents: dict[int, ast.AST], root: ast.AST | None) -> bool:
    """Is only ``node``'s truth used: it is the condition (``root``), the operand of a
    ``not``, the test of a ternary, or an operand of an ``and`` / ``or`` itself used so?"""
    if node is root:
        return True
    parent = parents.get(id(node))
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        return True
    if isinstance(parent, ast.IfExp):
        return parent.test is node
    return isinstance(parent, ast.BoolOp) and _truth_only(parent, parents, root)


def _use_is_classed(node: ast.Attribute, parents: dict[int, ast.AST], root: ast.AST | None) -> bool:
    """Is this read of a classed attribute one of the uses its class decides? (``root``:
    the text's root when the text is a condition, else ``None``.)"""
    if _truth_only(node, parents, root):
        return True
    parent = parents.get(id(node))
    if isinstance(parent, ast.Attribute) and parent.attr == "lower":
        call = parents.get(id(parent))
        cmp = parents.get(id(call)) if isinstance(call, ast.Call) else None
        return (
            isinstance(call, ast.Call)
            and call.func is parent
            and not call.args
            and not call.keywords
            and isinstance(cmp, ast.Compare)
            and cmp.left is call
            and len(cmp.ops) == 1
            and isinstance(cmp.ops[0], ast.In | ast.NotIn)
            and _literal_specials(cmp.comparators[0])
        )
    if isinstance(parent, ast.List | ast.Tuple):
        parent = parents.get(id(parent))  # inside ``in (None, path)``
        return isinstance(parent, ast.Compare) and _compares_paths(parent)
    if isinstance(parent, ast.Compare):
        if _compares_paths(parent):
            return True
        return (
            parent.left is node
            and len(parent.ops) == 1
            and isinstance(parent.ops[0], ast.Is | ast.IsNot)
            and _none(parent.comparators[0])
        )
    if isinstance(parent, ast.Call):
        return (
            isinstance(parent.func, ast.Name)
            and parent.func.id not in _COMPUTED
            and any(a is node for a in parent.args)
        )
    return False


@functools.lru_cache(maxsize=65536)
def _text_uses_by_class(text: str, condition: bool) -> bool:
    if not any(a in text for a in CLASSED):
        return True
    try:
        root = to_node(text, whitelist=False)
    except (UnsafeExpression, SyntaxError, ValueError, RecursionError):
        return False
    parents: dict[int, ast.AST] = {}
    for p in ast.walk(root):
        for c in ast.iter_child_nodes(p):
            parents[id(c)] = p
    for n in ast.walk(root):
        if isinstance(n, ast.Attribute) and n.attr in CLASSED:
            if not _use_is_classed(n, parents, root if condition else None):
                return False
        elif isinstance(n, ast.Name) and n.id in CLASSED:
            return False  # a local of that name: its origin is not known here
        elif isinstance(n, ast.Constant) and n.value in CLASSED:
            return False  # getattr(args, "model_path") and the like
    return True


def uses_by_class(texts: Iterable[str], condition: bool = True) -> bool:
    """Do ``texts`` use the classed attributes only in ways their classes decide?
    ``condition``: the texts are conditions (only their truth is used), not values."""
    return all(_text_uses_by_class(t, condition) for t in texts)


@functools.lru_cache(maxsize=16384)
def card_classed(when: str, require: str) -> frozenset[str]:
    """The classed attributes a card's own conditions (and the helpers they call) allow
    to be read by class (all of them, or none)."""
    if CLASSED & helper_reads(when, require) or not uses_by_class((when, require)):
        return frozenset()
    return CLASSED


# a slice's writes, judged once per slice object (kept, so a reused id cannot answer):
# (may its paths be read by class?, the facts that must then be absent)
_SLICES: dict[int, tuple[Slice, tuple[bool, frozenset[str]]]] = {}
_SLICES_CAP = 8192
_lock = threading.Lock()


def _path_value(text: str) -> tuple[bool, str | None]:
    """(is the value a folded path may take decided by the classes?, the fact key it is
    looked up under): a copy of a classed path, ``None``, a plain name (a local) or a call
    of a plain function name the interpreter does not compute. The last two are facts
    looked up by their text: absent, the value is unknown whatever the paths."""
    try:
        node = to_node(text, whitelist=False)
    except (UnsafeExpression, SyntaxError, ValueError, RecursionError):
        return False, None
    if _classed_read(node) or _none(node):
        return True, None
    if isinstance(node, ast.Name) and node.id not in DEFAULT_ARG_OBJECTS:
        return True, node.id  # a local the fold does not know: a fact by its name
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id not in _COMPUTED
    ):
        return True, norm_text(node, DEFAULT_ARG_OBJECTS)
    return False, None


def _slice_info(piece: Slice) -> tuple[bool, frozenset[str]]:
    with _lock:
        got = _SLICES.get(id(piece))
    if got is not None and got[0] is piece:
        return got[1]
    ok, absent = True, set()
    for w, pw in piece.writes:
        value = pw.value or "None"
        fine, key = (
            _path_value(value) if w.attr in CLASSED else (uses_by_class([value], False), None)
        )
        if key is not None:
            absent.add(key)
        if not (fine and uses_by_class(g for g, _ in pw.all_guards(False))):
            ok = False
            break
    info = (ok, frozenset(absent))
    with _lock:
        if len(_SLICES) >= _SLICES_CAP:
            _SLICES.clear()
        _SLICES[id(piece)] = (piece, info)
    return info


def folds_classed(slices: Iterable[Slice], fact_reads: Reads) -> frozenset[str]:
    """The classed attributes the writes of the folded ``slices`` allow to be read by
    class (all of them, or none; writes outside the slices were not evaluated), given the
    evaluation's ``fact_reads``: a path assigned from a call must have found no fact."""
    absent: set[str] = set()
    for piece in slices:
        ok, keys = _slice_info(piece)
        if not ok:
            return frozenset()
        absent |= keys
    return CLASSED if not absent or answered_absent(fact_reads, absent) else frozenset()


def origin_of(reads: Iterable[str], attrs: Mapping[str, Value]) -> Origin:
    """The raw values of the classed attributes among ``reads`` (for :func:`rebased`)."""
    return tuple((k, _raw(attrs.get(k))) for k in reads if k in CLASSED)


def rebased(result: CardResult, origin: Origin, attrs: Mapping[str, Value]) -> CardResult | None:
    """``result``, recorded with the classed values ``origin``, as the verdict for ``attrs``
    (which answer its reads alike): each input of a classed attribute shows the path of
    ``attrs`` that takes the old one's place. ``None`` when the reason, a note or another
    input quotes an old path."""
    moved: dict[str, str] = {}
    for name, old in origin:
        new = _raw(attrs.get(name))
        if isinstance(old, str) and isinstance(new, str) and old and old != new:
            moved[old] = new
    if not moved:
        return result
    texts = (result.reason, *result.notes)
    if any(old in t for old in moved for t in texts):
        return None
    inputs: list[tuple[str, object, str]] = []
    for name, value, detail in result.inputs:
        if name not in CLASSED:
            if any(old in detail or old in repr(value) for old in moved):
                return None
            inputs.append((name, value, detail))
            continue
        if isinstance(value, str):
            value = moved.get(value, value)
        for old in sorted(moved, key=len, reverse=True):
            detail = detail.replace(old, moved[old])
        inputs.append((name, value, detail))
    return replace(result, inputs=inputs)
