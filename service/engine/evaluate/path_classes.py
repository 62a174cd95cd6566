"""Path classes: the model paths of :data:`CLASSED` read by class, for memo keys that many
paths share (used by the slice fold and by the rule cards, see
:mod:`~service.engine.rules.value_classes`).

A path's *class* is ``None``, ``""``, ``"none"``, ``"dummy"`` or any other text, plus which
other paths of :data:`CLASSED` it equals. A text uses the paths *by class* when every read
of one is:

* ``<args>.model_path.lower() in / not in`` a literal collection of ``"none"`` /
  ``"dummy"``;
* ``<args>.model_path is / is not None``, or its truth (``if cfg.speculative_draft_model_path:``);
* compared (``==``, ``!=``, ``in``, ``not in``) with another path of :data:`CLASSED`,
  alone or in a literal tuple or list with ``None``;
* an argument of a call to a plain function name that the interpreter does not compute
  (not a builtin): such a call is a fact looked up by its *text*, whatever the value.

A write (:func:`writes_info`) keeps the class when its guards and value use the paths by
class and, if it assigns a path, its value is a copy of a path, ``None``, or a fact looked up
by text (a call as above, or a local) that must then be absent: so a folded path is always
a typed one, ``None`` or unknown, and the class decides every test made on it. A write's
guard may also pass a path to a call at the end of a chain of names and calls
(``os.path.exists(self.model_path)``): that is a fact looked up by its text too, as long as
no fact answers a prefix of the chain (``os``, ``os.path``; the interpreter would then call
the method on that fact's value), so those prefixes must be absent as well.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Iterable, Mapping

from kb.conditions import DEFAULT_ARG_OBJECTS, attr_chain, norm_text, to_node
from kb.errors import UnsafeExpression
from service.engine.evaluate.literal_classes import parents_of, truth_only
from service.engine.expr.interpreter import Value
from service.engine.expr.values import BUILTINS, VALUE_METHODS

__all__ = [
    "CLASSED",
    "Origin",
    "WritesInfo",
    "class_signature",
    "moved_entry",
    "moved_paths",
    "origin_of",
    "swapped",
    "uses_by_class",
    "writes_info",
]

#: the attributes read by class when the texts evaluated allow it
CLASSED = frozenset({"model_path", "speculative_draft_model_path"})
#: the raw values of the classed attributes a memo entry was made with
Origin = tuple[tuple[str, object], ...]
#: (do the writes keep the class?, the fact keys that must then be absent)
WritesInfo = tuple[bool, frozenset[str]]
_ORDER = tuple(sorted(CLASSED))
_SPECIAL = frozenset({"none", "dummy"})
#: calls the interpreter computes from their arguments' values
_COMPUTED = frozenset({*BUILTINS, "getattr", "hasattr", "isinstance", "bool", "any", "all"})


def _raw(v: Value | None) -> object:
    return None if v is None else v.value


def class_signature(
    attrs: Mapping[str, Value],
    name: str,
    provenance: bool = True,
    among: Collection[str] = CLASSED,
) -> object:
    """The memo view of the classed attribute ``name`` of ``attrs``: its class, how it was
    given (the value spelled ``<v>`` in the provenance; left out when ``provenance`` is
    False) and the other classed attributes of ``among`` equal to it; ``"?"`` when absent.
    A value of another type than text or ``None`` is its own class."""
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
        if not provenance:
            return ("exact", repr(raw))
        return ("exact", repr(raw), v.provenance.kind, v.provenance.detail)
    same = tuple(o for o in _ORDER if o != name and o in among and _raw(attrs.get(o)) == raw)
    if not provenance:
        return ("class", cls, same)
    detail = v.provenance.detail
    if isinstance(raw, str) and raw and detail:
        detail = detail.replace(raw, "<v>")
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


def _chain_prefixes(call: ast.Call) -> list[str] | None:
    """For a call ending a chain of names and calls that is no argument object's
    (``os.path.exists(…)``), the fact keys of the chain's prefixes (``os``, ``os.path``):
    with none of them a fact, the interpreter looks the whole call up by its text.
    ``None`` for another call, or one whose chain calls a method it computes."""
    if not isinstance(call.func, ast.Attribute):
        return None
    chain = attr_chain(call, DEFAULT_ARG_OBJECTS)
    if chain is None or chain[0] or len(chain[1]) < 2:
        return None
    segs = chain[1]
    if any(s.endswith(")") and s.split("(", 1)[0] in VALUE_METHODS for s in segs[1:]):
        return None
    return [".".join(segs[:i]) for i in range(1, len(segs))]


def _use_is_classed(
    node: ast.Attribute,
    parents: dict[int, ast.AST],
    root: ast.AST | None,
    computed: Collection[str],
    needs: set[str] | None,
) -> bool:
    """Is this read of a classed attribute one of the uses its class decides? (``root``:
    the text's root when the text is a condition, else ``None``; ``needs``: where the
    caller can require facts to be absent, the fact keys such a use adds, see
    :func:`_chain_prefixes`, else ``None``: such a use is refused.)"""
    if truth_only(node, parents, root):
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
        if not any(a is node for a in parent.args):
            return False
        if isinstance(parent.func, ast.Name):
            return parent.func.id not in _COMPUTED and parent.func.id not in computed
        prefixes = _chain_prefixes(parent) if needs is not None else None
        if prefixes is None or needs is None:
            return False
        needs.update(prefixes)
        return True
    return False


@functools.lru_cache(maxsize=65536)
def _text_class_needs(
    text: str, condition: bool, computed: frozenset[str], chains: bool
) -> frozenset[str] | None:
    """The fact keys that must be absent for ``text`` to use the classed attributes by
    class, ``None`` when it uses them another way (``chains``: a path passed to a call at
    the end of a chain is such a use, needing its prefixes absent; else it is refused)."""
    if not any(a in text for a in CLASSED):
        return frozenset()
    try:
        root = to_node(text, whitelist=False)
    except (UnsafeExpression, SyntaxError, ValueError, RecursionError):
        return None
    parents = parents_of(root)
    needs: set[str] | None = set() if chains else None
    for n in ast.walk(root):
        if isinstance(n, ast.Attribute) and n.attr in CLASSED:
            if not _use_is_classed(n, parents, root if condition else None, computed, needs):
                return None
        elif isinstance(n, ast.Name) and n.id in CLASSED:
            return None  # a local of that name: its origin is not known here
        elif isinstance(n, ast.Constant) and n.value in CLASSED:
            return None  # getattr(args, "model_path") and the like
    return frozenset(needs or ())


def uses_by_class(
    texts: Iterable[str], condition: bool = True, computed: frozenset[str] = frozenset()
) -> bool:
    """Do ``texts`` use the classed attributes only in ways their classes decide?
    ``condition``: the texts are conditions (only their truth is used), not values;
    ``computed``: more function names the evaluation computes from their arguments."""
    return all(_text_class_needs(t, condition, computed, False) == frozenset() for t in texts)


def class_needs(texts: Iterable[str], condition: bool = True) -> frozenset[str] | None:
    """The fact keys that must be absent for ``texts`` to use the classed attributes only
    in ways their classes decide (a path passed to a call at the end of a chain,
    :func:`_chain_prefixes`); ``None`` when they use them another way."""
    out: set[str] = set()
    for t in texts:
        needs = _text_class_needs(t, condition, frozenset(), True)
        if needs is None:
            return None
        out |= needs
    return frozenset(out)


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


def writes_info(writes: tuple[tuple[object, object], ...]) -> WritesInfo:
    """Do these writes (``(chain.Write, PreparedWrite)`` pairs) keep the paths' classes,
    and which facts must be absent for that (module docstring)?"""
    ok, absent = True, set()
    for w, pw in writes:
        value = getattr(pw, "value", None) or "None"
        if getattr(w, "attr", None) in CLASSED:
            fine, key = _path_value(value)
        else:
            fine, key = uses_by_class([value], False), None
        if key is not None:
            absent.add(key)
        guards = pw.all_guards(False)  # type: ignore[attr-defined]
        needs = class_needs(g for g, _ in guards) if fine else None
        if needs is None:
            ok = False
            break
        absent |= needs
    return ok, frozenset(absent)


def origin_of(reads: Iterable[str], attrs: Mapping[str, Value]) -> Origin:
    """The raw values of the classed attributes among ``reads`` (for :func:`rebased`)."""
    return tuple((k, _raw(attrs.get(k))) for k in reads if k in CLASSED)


def moved_paths(origin: Origin, attrs: Mapping[str, Value]) -> dict[str, str]:
    """Old path -> the path of ``attrs`` that takes its place (only those that differ)."""
    moved: dict[str, str] = {}
    for name, old in origin:
        new = _raw(attrs.get(name))
        if isinstance(old, str) and isinstance(new, str) and old and old != new:
            moved[old] = new
    return moved


def _overlap(a: str, b: str) -> bool:
    """Can occurrences of ``a`` and ``b`` in one text share characters?"""
    return a in b or b in a or any(a.endswith(b[:i]) or b.endswith(a[:i]) for i in range(1, len(b)))


def swapped(text: str, old: str | None, moved: Mapping[str, str]) -> str | None:
    """``text`` with each occurrence of the old path ``old`` (if any) replaced by the path
    taking its place in ``moved``; ``None`` when ``text`` quotes any other old path of
    ``moved`` (or old paths overlap, so that occurrences cannot be told apart)."""
    olds = sorted(moved, key=len, reverse=True)
    if any(_overlap(a, b) for i, a in enumerate(olds) for b in olds[i + 1 :]):
        return None
    if not any(o in text for o in olds):  # the usual case: nothing to replace
        return text
    found = re.findall("|".join(map(re.escape, olds)), text)
    if any(f != old for f in found):
        return None
    return text.replace(old, moved[old]) if old and found else text


def moved_entry(
    name: str, value: object, detail: str, moved: Mapping[str, str]
) -> tuple[object, str] | None:
    """A shown ``(value, detail)`` of attribute ``name``, made with the old paths of
    ``moved``, for the new ones: a classed attribute holding an old path holds the path that
    takes its place (and its detail says so); ``None`` when the entry quotes an old path
    otherwise."""
    old = value if name in CLASSED and isinstance(value, str) and value in moved else None
    shown = swapped(detail, old, moved)
    if shown is None or (old is None and swapped(repr(value), None, moved) is None):
        return None
    return (moved[old] if old is not None else value), shown
