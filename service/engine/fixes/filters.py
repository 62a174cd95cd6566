"""Candidate filters that keep a fix a fix of *this* check, for *this* machine and model.

Applied to the candidate edits before they are ranked (:mod:`service.engine.fixes.propose`):

* **The refused value** (:func:`refused_values`, :func:`sets_refused`). A failing atom that
  compares a flag with a constant and fires *because* of equality (``self.x == "a"``,
  ``self.x in ("a", "b")`` true; ``self.x != "a"``, ``self.x not in (...)`` false) names
  the value(s) the check refuses. An atom static evaluation could not decide counts too
  when the check fired and it is a conjunct of a piece that had to hold: at the crash it
  held (``self.x == "a"`` with ``x`` chosen by SGLang at start-up). A candidate setting that flag to one of them is dropped:
  whatever static evaluation thought of it (undecided, say), it asks SGLang for what it
  just refused.
* **Another check's guard** (:func:`guard_flip`). A candidate that touches only flags read
  by an early exit the path passes (``if not self.enable_dp_attention: return`` before
  the check) or by the guard of the call of the check's function does not fix the check: it
  skips the block the check is in, turning that part of the launch off. A flag the check's
  own message names (``--prefill-only-disable-kv-cache does not currently support ...``
  after ``if not cfg.prefill_only_disable_kv_cache: return``) is the check's subject, not
  another check's guard: turning it off answers the message. Otherwise such a candidate
  ranks after every fix of the check that gives up no more feature flags
  (:func:`~service.engine.fixes.ranking.rank`), says so (origin and verdict: "skips the
  check ... turns off ..."), and is kept only if replay accepts it: the replay search drops
  one that SGLang refuses.
* **An earlier sibling check** (:func:`sibling_trips`). A candidate under which a check
  the path passed before this one (an ``if ...: raise`` of the same function) raises
  makes the check pass only because the launch fails earlier: it trips that check.
* **Backends by GPU generation and model architecture** (:func:`backend_refusals`). A
  candidate setting a ``*_backend`` flag to a value that an error rule card of the release
  (derived from its checks, or curated in ``kb/rules``) refuses *on these facts*: a card
  violated after the edit, not before it, whose evaluation read a fact about the GPU
  generation or the model's architecture (``is_sm100_supported()``,
  ``get_platform().is_sm90``, ``model_arch``, ``use_mla_backend()``...; not, say, whether
  a package is installed). It is dropped
  before ranking, and the card is cited on the other candidates of that flag. Unknown
  facts leave a card undecided, so nothing is dropped for a machine or model not known.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.evaluate.pieces import PiecePart, atom_signs
from service.engine.expr.interpreter import Value
from service.engine.fixes.model import Edit
from service.engine.flags.parse import ParsedArgs

__all__ = [
    "SKIP_KINDS",
    "BackendRefusal",
    "backend_refusals",
    "guard_flip",
    "refused_values",
    "screened",
    "sets_refused",
    "sibling_trips",
    "turns_off",
    "SKIP_NOTE",
]

#: piece kinds that are not the check's own: an earlier ``if ...: return`` the path passes,
#: and the guard of the call of the check's function (:data:`~.pieces.PIECE_KINDS`)
SKIP_KINDS = frozenset({"exit_return", "call_site"})
#: how a guard flip is named in its origin and verdict (the replay search drops one that
#: replay rejects: :func:`service.replay.fix_search.rerank`)
SKIP_NOTE = "skips the check"
#: fact keys about the GPU generation or the model's architecture (the platform, compute
#: capability, SM/arch predicates, MLA/NSA/DSA, the architecture and checkpoint facts)
_HW_OR_ARCH_FACT = re.compile(
    r"is_sm\d|\.is_sm\d|capability|platform|hopper|blackwell|ampere|is_hip|is_cuda|gfx|"
    r"model_arch|architectures|mla|nsa|dsa|checkpoint_|model_type",
    re.IGNORECASE,
)
_EQUAL = (ast.Eq, ast.In, ast.Is)
_UNEQUAL = (ast.NotEq, ast.NotIn, ast.IsNot)


@functools.lru_cache(maxsize=4096)
def _compare(text: str) -> tuple[str, bool, tuple[object, ...]] | None:
    """``(attr, equality, constants)`` of an atom ``<obj>.attr OP constant(s)`` (either side),
    None for any other atom. ``equality``: the op is ``==``/``in``/``is``."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return None
    op = node.ops[0]
    if not isinstance(op, _EQUAL + _UNEQUAL):
        return None
    left, right = node.left, node.comparators[0]
    if not isinstance(left, ast.Attribute):
        left, right = right, left
    if not isinstance(left, ast.Attribute):
        return None
    if isinstance(right, ast.Constant):
        values: tuple[object, ...] = (right.value,)
    elif isinstance(right, ast.Tuple | ast.List | ast.Set) and all(
        isinstance(e, ast.Constant) for e in right.elts
    ):
        values = tuple(e.value for e in right.elts if isinstance(e, ast.Constant))
    else:
        return None
    return left.attr, isinstance(op, _EQUAL), values


@functools.lru_cache(maxsize=4096)
def _conjunction(condition: str) -> bool:
    """Whether ``condition`` is a conjunction of atoms (no ``or``, no ternary): when it
    held, each of its atoms held with its sign."""
    try:
        tree = ast.parse(condition.strip(), mode="eval")
    except SyntaxError:
        return False
    return not any(
        isinstance(n, ast.IfExp) or (isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or))
        for n in ast.walk(tree)
    )


def _held(part: PiecePart, fired: object) -> list[object]:
    """Per atom of ``part``: its truth at the crash when it pushed the check to fire, else
    None. A decided atom pushes when :meth:`PiecePart.atoms_failing` says so; an undecided
    one of a conjunction that had to hold, when the check fired (it raised: the message
    printed its values), held with its sign."""
    atoms = part.result.atoms
    failing = part.atoms_failing()
    signs = atom_signs(part.condition)
    conj = (
        fired is True
        and part.polarity is True
        and part.holds is not False
        and part.explains
        and len(signs) == len(atoms)
        and _conjunction(part.condition)
    )
    out: list[object] = []
    for i, atom in enumerate(atoms):
        if isinstance(atom.value, bool):
            out.append(atom.value if failing[i] else None)
        else:
            out.append(signs[i] if conj else None)
    return out


def refused_values(ev: PathEvaluation) -> dict[str, list[object]]:
    """attr -> the values the located check refuses it: the constants of comparison atoms
    that pushed it to fire on equality (module docstring; :func:`_held`). Pieces that do
    not explain the crash (passed sibling checks) and call-site guards count for nothing."""
    out: dict[str, list[object]] = {}
    for part in ev.parts:
        if part.role == "call_site":
            continue
        for atom, truth in zip(part.result.atoms, _held(part, ev.fired), strict=True):
            parsed = _compare(atom.text) if truth is not None else None
            if parsed is None:
                continue
            attr, equality, values = parsed
            if equality != truth:  # fires on inequality: the constant is what it wants
                continue
            if all(attr != name for name, _, _ in atom.inputs):
                continue
            seen = out.setdefault(attr, [])
            seen.extend(v for v in values if v not in seen)
    return out


def sets_refused(edit: Edit, refused: Mapping[str, list[object]]) -> bool:
    """Whether ``edit`` sets a flag to a value the check refuses (:func:`refused_values`)."""
    return any(
        attr in refused and any(value == r and type(value) is type(r) for r in refused[attr])
        for attr, value in edit.set.items()
    )


def _names(part: PiecePart) -> set[str]:
    return {n for a in part.result.atoms for n, _, _ in a.inputs}


def guard_flip(
    edit: Edit, ev: PathEvaluation, named: frozenset[str] = frozenset()
) -> PiecePart | None:
    """The early exit (or call-site guard) ``edit`` flips instead of fixing the check: every
    attribute it touches is read by such a piece (:data:`SKIP_KINDS`) and none by the check's
    own pieces (its test, its enclosing ``if``) or named by its message (``named``:
    :func:`message_attrs`); None otherwise."""
    touched = set(edit.set) | set(edit.remove)
    if not touched:
        return None
    own: set[str] = set(named)
    skip: list[PiecePart] = []
    for part in ev.parts:
        if part.kind in SKIP_KINDS:
            skip.append(part)
        elif part.explains:
            own |= _names(part)
    if touched & own:
        return None
    return next((p for p in skip if touched <= _names(p)), None)


def message_attrs(check: Check, catalog: Catalog) -> frozenset[str]:
    """The attributes of the flags (``--kv-cache-dtype``) that ``check``'s message source
    spells out: what the check says it is about."""
    by_flag = catalog.by_flag()
    return frozenset(
        by_flag[f].attr for f in _MESSAGE_FLAG.findall(check.message or "") if f in by_flag
    )


#: a flag spelled in a message source (``--kv-cache-dtype``; not ``--kv-cache-dtype=``'s tail)
_MESSAGE_FLAG = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def sibling_trips(check: Check, ev: PathEvaluation) -> list[dict[str, Any]]:
    """The earlier sibling checks of ``check``'s function (``exit_raise`` pieces) that raise
    on ``ev`` (a candidate's evaluation of the check): the check is then not reached, so it
    passes, but the launch fails at the sibling instead. As re-checked neighbours are."""
    return [
        {
            "id": f"{check.id}@{p.line}",
            "path": check.path,
            "function": check.function,
            "line": p.line,
            "message": "",
            "condition": p.condition,
        }
        for p in ev.parts
        if p.kind == "exit_raise" and p.holds is False
    ]


def turns_off(edit: Edit, flip: PiecePart, parsed: ParsedArgs, catalog: Catalog) -> str:
    """What a guard flip gives up, in the user's spellings: ``turns off --enable-lora: an
    early exit (`not self.enable_lora`) then skips the check``."""
    by_attr = catalog.by_attr()

    def spell(attr: str) -> str:
        mine = parsed.spelling(attr)
        spec = by_attr.get(attr)
        return mine or (spec.flags[0] if spec is not None and spec.flags else attr)

    removed = ", ".join(spell(a) for a in edit.remove)
    setting = ", ".join(f"{spell(a)} {v}" for a, v in edit.set.items())
    what = removed or "the part of the launch the check guards"
    what += f" (by setting {setting})" if setting else ""
    where = (
        "the guard of the call of the check's function"
        if flip.kind == "call_site"
        else "an early exit"
    )
    return f"turns off {what}: {where} (`{flip.condition}`) then skips the check"


@dataclass(frozen=True)
class BackendRefusal:
    """A backend value dropped before ranking, and the rule card that refuses it."""

    attr: str
    value: object
    card: str  # the card's id
    citation: str  # the card's first citation

    def phrase(self) -> str:
        return f"{self.value} left out: rule {self.card} refuses it here ({self.citation})"


def _is_backend(attr: str) -> bool:
    return attr.endswith("_backend")


def backend_refusals(
    store: Store,
    version: str,
    edits: list[Edit],
    attrs: dict[str, Value],
    facts: dict[str, Value],
    parsed: ParsedArgs,
    edited: Callable[[Edit], dict[str, Value]],
    *,
    facts_sig: str | None = None,
    among: Collection[str] | None = None,
) -> dict[tuple[Any, ...], BackendRefusal]:
    """Edit key -> why it is dropped, for each edit of ``edits`` that sets a backend flag
    (``*_backend``) to a value an error card of ``version`` refuses on these facts (module
    docstring): violated after the edit and not by the user's command, its evaluation
    reading a fact. ``edited(edit)`` is the attributes after ``edit``.

    ``among``: only the edits setting one of these attributes are judged (the cards asked
    are those of every edit all the same, so each answer is the one without ``among``)."""
    from service.engine.rules.checker import cards_for, evaluate_cards

    todo = [e for e in edits if e.set and any(_is_backend(a) for a in e.set)]
    judged = todo if among is None else [e for e in todo if not set(among).isdisjoint(e.set)]
    if not judged:
        return {}
    backends = {a for e in todo for a in e.set if _is_backend(a)}
    # a card can refuse on the facts only if its conditions name a hardware or architecture
    # fact (its inputs are what its conditions read)
    cards = [
        c
        for c in cards_for(store, version)
        if c.severity == "error"
        and c.reads & backends
        and (_HW_OR_ARCH_FACT.search(c.when) or _HW_OR_ARCH_FACT.search(c.require))
    ]
    if not cards:
        return {}
    before = {
        r.card.id
        for r in evaluate_cards(
            store, version, attrs, facts, parsed, cards=cards, facts_sig=facts_sig
        )
        if r.verdict == "violated"
    }
    out: dict[tuple[Any, ...], BackendRefusal] = {}
    for edit in judged:
        mine = [c for c in cards if c.id not in before and c.reads & set(edit.set)]
        for r in evaluate_cards(
            store, version, edited(edit), facts, parsed, cards=mine, facts_sig=facts_sig
        ):
            if r.verdict != "violated" or not any(
                n in facts and _HW_OR_ARCH_FACT.search(n) for n, _, _ in r.inputs
            ):
                continue
            attr = next((a for a in edit.set if _is_backend(a) and a in r.card.reads), None)
            if attr is None:
                continue
            out[edit.key()] = BackendRefusal(
                attr, edit.set[attr], r.card.id, r.card.citations[0] if r.card.citations else ""
            )
            break
    return out


def screened(
    store: Store,
    version: str,
    ev: PathEvaluation,
    edits: list[Edit],
    parsed: ParsedArgs,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    edited: Callable[[Edit], dict[str, Value]],
    *,
    facts_sig: str | None = None,
    among: Collection[str] | None = None,
) -> list[Edit]:
    """``edits`` without those that set a value the located check refuses
    (:func:`sets_refused`) or a backend value an error rule card of the release refuses on
    these facts (:func:`backend_refusals`); each kept edit setting a flag whose other values
    a card refused cites it (``Edit.notes``). ``edited(edit)``: the attributes after it.

    ``among``: only the backend edits setting one of these attributes are judged by the
    cards (the others are kept as they are). An edit setting only attributes of ``among``
    gets the same notes as without it: every refusal it could cite is of such an edit."""
    refused = refused_values(ev)
    edits = [e for e in edits if not sets_refused(e, refused)]
    dropped = backend_refusals(
        store, version, edits, attrs, facts, parsed, edited, facts_sig=facts_sig, among=among
    )
    kept = [e for e in edits if e.key() not in dropped]
    for e in kept:
        e.notes = [d.phrase() for d in dropped.values() if d.attr in e.set][:3]
    return kept
