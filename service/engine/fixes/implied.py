"""The flags a crash implies when the user's command is not known.

Most users post only the exception line ("AssertionError: Cannot set
--disaggregation-decode-tp for the decode engine."): no frames, no command. The located
check is then evaluated on the release's defaults, under which it does not fire, and every
candidate "fixes" it, the most harmful first: setting the flag an enclosing ``if`` reads so
that the check is reached with a passing value, or a switch that merely skips it.

But the check *did* raise, so every piece of its path took its polarity with the flags the
launch ran with: its test failed, its enclosing ``if`` statements held, and the early exits and
sibling checks before it did not. :func:`implied_launch` reads those flags off the pieces'
own structure: a piece that is a conjunction when it must hold (``a and not b``), or a
disjunction when it must not (an assert's ``a or b``), fixes the truth of each of its atoms,
and an atom that compares one flag with constants fixes the flag:

* ``x`` true: a switch is on (``--enable-dp-lm-head``); another flag holds some value;
* ``x == c`` / ``x in (c,)`` true, ``x != c`` false: the flag is ``c``;
* a disjunction that held (``a or b``, an assert's ``a and b`` that failed) that is false on
  the defaults: one of its flags was set, which one is not known (each undecided; only
  with another flag implied: such a launch alone would rest on which one held);
* any other comparison with constants (``x is None`` false, ``not 0 <= x <= 1``,
  ``x in (a, b)``...) that the default does not satisfy: the flag was set to a value not
  known here (the fix drops it, or sets what the check accepts).

Only flags of the release's catalog whose default does not already give the atom its truth
are implied (an atom reading anything else, another flag or a fact, implies nothing), and
a flag two atoms imply differently is left out. The implied flags become the launch the
candidates are proposed for (:func:`~service.engine.fixes.propose.propose`): dropping
the flag the message names, or setting the flag its test asks for, now *fixes* the check
instead of keeping it unreached, and the guard atoms are ranked as guards. Each fix says
what it assumed (:meth:`ImpliedLaunch.note`).

An earlier write that would have reset an implied flag (``if self.dp_size == 1:
self.enable_dp_lm_head = False``, or an override hook returning that dict) did not run
either, so its ``if`` did not hold: the flag it tests was set (``--dp-size``, not to 1), or
for an ``and`` of such tests that all hold on the defaults, one of its flags was.

:func:`assumed_launch` does it all for a located check: when the command is unknown and the
check does not fire on what is known, the implied launch and the check evaluated on it
(kept only when it then fires or is undecided). The message's own recipe
(:mod:`service.engine.fixes.candidates`) is judged on it too: "Cannot enable both --a and
--b" sets nothing the crash did not already have.

The command counts as unknown (:func:`command_unknown`) when the user's flags hold no
required flag (every launch names its model) and no ``server_args`` line was logged:
flags printed in the message alone are not a command.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

from kb.catalog_types import NO_VALUE_ACTIONS, Catalog, FlagSpec
from kb.code_types import Check
from kb.store import Store
from service.engine.evaluate.chain import earlier_writes
from service.engine.evaluate.path_condition import PathEvaluation, evaluate_path
from service.engine.expr.interpreter import UNKNOWN, Provenance, Value
from service.engine.flags.parse import ParsedArgs, ParsedFlag

__all__ = [
    "ImpliedLaunch",
    "assumed_launch",
    "command_unknown",
    "command_whole",
    "implied_launch",
]

#: a value the launch had that is not known here (the flag was set)
_SOME = object()
_CONFLICT = object()


@dataclass
class ImpliedLaunch:
    """The attributes and parsed flags with the implied flags added, and those flags."""

    attrs: dict[str, Value]
    parsed: ParsedArgs
    implied: dict[str, object] = field(default_factory=dict)  # attr -> value (UNKNOWN: set)
    #: flags of which one held (``a or b`` held): each is undecided (UNKNOWN) in ``attrs``
    either: list[list[str]] = field(default_factory=list)
    #: the check evaluated on ``attrs`` (:func:`assumed_launch`)
    evaluation: PathEvaluation | None = None

    def note(self, catalog: Catalog) -> str:
        """What the fixes assume, in the catalog's spellings."""
        by_attr = catalog.by_attr()

        def flag(attr: str) -> str:
            spec = by_attr.get(attr)
            return spec.flags[0] if spec is not None and spec.flags else attr

        grouped = {a for g in self.either for a in g}
        parts = [" or ".join(flag(a) for a in g) + " set" for g in self.either]
        for attr, value in self.implied.items():
            spec = by_attr.get(attr)
            if attr in grouped:
                continue
            if value is UNKNOWN:
                parts.append(f"{flag(attr)} set")
            elif value is True and spec is not None and spec.action in NO_VALUE_ACTIONS:
                parts.append(flag(attr))
            else:
                parts.append(f"{flag(attr)} {value}")
        return (
            "assumes the launch had "
            + ", ".join(parts)
            + ": no command was given, and the check raised, so its path held"
        )


def command_unknown(parsed: ParsedArgs, attrs: dict[str, Value], catalog: Catalog) -> bool:
    """Whether the user's flags are not known: none of them is a required flag (the model)
    and no logged ``server_args`` line gave the resolved values (module docstring)."""
    by_attr = catalog.by_attr()
    if any(a == "model_path" or (a in by_attr and by_attr[a].required) for a in parsed.values):
        return False
    return not any(v.provenance.kind == "derived" for v in attrs.values())


#: the attribute of ``--config``: a file holding the rest of the command
_CONFIG_ATTR = "config"


def command_whole(parsed: ParsedArgs, attrs: dict[str, Value], catalog: Catalog) -> bool:
    """Whether the command the log shows can be run as it is, once changed: the user's
    flags are known (:func:`command_unknown`), or it names a config file holding the rest
    (``--config``; the file is never read, so its flags stay unknown to the checks)."""
    return _CONFIG_ATTR in parsed.values or not command_unknown(parsed, attrs, catalog)


@functools.lru_cache(maxsize=4096)
def _required_truths(condition: str, polarity: bool) -> tuple[bool, ...] | None:
    """Per atom of ``condition`` (in the evaluator's order), the truth it must have for the
    piece to evaluate to ``polarity``, when the piece's shape fixes every atom: a
    conjunction that holds, a disjunction that does not, nested (``a and not (b or c)``
    holding fixes all three; ``not`` flips an atom's sign). None for any other shape
    (``a or b`` that holds, a ternary between atoms)."""
    try:
        node = ast.parse(condition.strip(), mode="eval").body
    except SyntaxError:
        return None
    out: list[bool] = []

    def need(n: ast.expr, want: bool) -> bool:
        if isinstance(n, ast.BoolOp):
            if isinstance(n.op, ast.And) != want:  # an "and" that fails, an "or" that holds
                return False
            return all(need(v, want) for v in n.values)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return need(n.operand, not want)
        if isinstance(n, ast.IfExp):
            return False
        out.append(want)
        return True

    return tuple(out) if need(node, polarity) else None


def _read_of(node: ast.expr) -> ast.expr:
    """The flag read of a read with a fallback (``x if x is not None else c``, how a
    resolution read with a declared fallback is spelled), else ``node``."""
    if (
        isinstance(node, ast.IfExp)
        and isinstance(node.body, ast.Attribute)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.IsNot)
        and ast.dump(node.test.left) == ast.dump(node.body)
        and isinstance(node.test.comparators[0], ast.Constant)
        and node.test.comparators[0].value is None
        and isinstance(node.orelse, ast.Constant)
    ):
        return node.body
    return node


def _attr_of(node: ast.expr) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else None


def _implied_value(text: str, truth: bool, now: object, no_value: bool) -> object:
    """What an atom's required ``truth`` says of its one flag, given the atom's truth ``now``
    on the defaults: the value (``_SOME``: some value not known here), None when it says
    nothing or the default already gives it."""
    if now is truth or not isinstance(now, bool):
        return None
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Attribute):  # a bare flag: a switch on or off, or some value
        return truth if no_value else (_SOME if truth else None)
    if not isinstance(node, ast.Compare):
        return None
    sides = [_read_of(s) for s in (node.left, *node.comparators)]
    flags = [s for s in sides if isinstance(s, ast.Attribute)]
    if len(flags) != 1 or not all(s is flags[0] or _constants(s) is not None for s in sides):
        return None
    if len(node.ops) == 1 and isinstance(
        node.ops[0], ast.Eq | ast.Is | ast.In | ast.NotEq | ast.IsNot | ast.NotIn
    ):
        equal = isinstance(node.ops[0], ast.Eq | ast.Is | ast.In)
        consts = _constants(sides[1] if sides[0] is flags[0] else sides[0]) or []
        if (truth if equal else not truth) and len(consts) == 1:
            return consts[0]  # it held equal to the one constant
    return _SOME  # another value than the default's, not known here


def _constants(node: ast.expr) -> list[object] | None:
    """The constants of a constant, or of a tuple/list/set of constants; None otherwise."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and all(
        isinstance(e, ast.Constant) for e in node.elts
    ):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return None


def implied_launch(
    ev: PathEvaluation, attrs: dict[str, Value], parsed: ParsedArgs, catalog: Catalog
) -> ImpliedLaunch | None:
    """The launch with the flags the raised check implies (module docstring), None when its
    pieces imply none."""
    by_attr = catalog.by_attr()
    found: dict[str, object] = {}
    either: list[list[str]] = []
    for part in ev.parts:  # every piece of the path took its polarity at the crash
        truths = _required_truths(part.condition, part.polarity)
        one_of = truths is None and part.holds is False
        if one_of:  # "a or b" held: one of its atoms did, which one is not known
            truths = _required_truths(part.condition, not part.polarity)
            truths = None if truths is None else tuple(not t for t in truths)
        if truths is None or len(truths) != len(part.result.atoms):
            continue
        group: list[str] = []
        for atom, truth in zip(part.result.atoms, truths, strict=True):
            names = {n for n, _, _ in atom.inputs}
            if len(names) != 1:
                continue
            attr = next(iter(names))
            spec = by_attr.get(attr)
            if spec is None or not spec.flags or attr in parsed.values:
                continue
            value = _implied_value(
                atom.text, truth, atom.value, spec.action in NO_VALUE_ACTIONS or spec.nargs == "0"
            )
            if value is None:
                continue
            if one_of:
                value = _SOME
                group.append(attr)
            if attr in found and found[attr] != value:
                found[attr] = _CONFLICT
            else:
                found[attr] = value
        if len(group) > 1:
            either.append(group)
    implied = {a: (UNKNOWN if v is _SOME else v) for a, v in found.items() if v is not _CONFLICT}
    grouped = {a for g in either for a in g}
    if not set(implied) - grouped:  # "a or b" alone: a launch resting on which one held
        return None
    return _launch(attrs, parsed, catalog, implied, either)


def _launch(
    attrs: dict[str, Value],
    parsed: ParsedArgs,
    catalog: Catalog,
    implied: dict[str, object],
    either: list[list[str]],
) -> ImpliedLaunch:
    """The launch ``attrs``/``parsed`` with the ``implied`` flags added."""
    by_attr = catalog.by_attr()
    new_attrs = dict(attrs)
    values = dict(parsed.values)
    start = max((pf.index for pf in parsed.values.values()), default=-1) + 1
    for i, (attr, value) in enumerate(implied.items()):
        flag = by_attr[attr].flags[0]
        raw = [flag] if value is UNKNOWN or isinstance(value, bool) else [flag, str(value)]
        new_attrs[attr] = Value(
            value, Provenance("flag", f"implied by the check's path: {' '.join(raw)}")
        )
        values[attr] = ParsedFlag(
            attr=attr, value=value, token=flag, raw=raw, index=start + i, flag=flag
        )
    return ImpliedLaunch(
        new_attrs,
        ParsedArgs(
            values=values,
            unknown=list(parsed.unknown),
            errors=list(parsed.errors),
            abbreviations=dict(parsed.abbreviations),
        ),
        implied,
        [g for g in either if all(a in implied for a in g)],
    )


#: how an earlier step writes a flag: an assignment, or an override hook's returned dict
_RESET_KINDS = frozenset({"write", "return_dict"})


def _not_reset(
    store: Store,
    version: str,
    check: Check,
    implied: dict[str, object],
    parsed: ParsedArgs,
    catalog: Catalog,
) -> tuple[dict[str, object], list[list[str]]]:
    """More flags the crash implies: an earlier write that would have reset an implied flag
    (``if self.dp_size == 1: self.enable_dp_lm_head = False``) did not run, so what its one
    ``if`` reads did not make it hold (``--dp-size`` was set, not to 1). The ``if`` is a test
    of one flag, or a conjunction of such tests that all hold on the defaults (``view.dp_size
    == 1 and view.ep_join_mode != "scale"``): one of those flags was set, which one is not
    known (an ``either`` group, returned second). Only a write (or an override's returned
    dict) of a literal other than the implied value."""
    by_attr = catalog.by_attr()
    out: dict[str, object] = {}
    groups: list[list[str]] = []
    for attr, value in implied.items():
        if value is UNKNOWN:
            continue
        for w in earlier_writes(store, version, attr, check):
            if w.kind not in _RESET_KINDS or w.value is None or len(w.guards) != 1:
                continue
            try:
                written = ast.literal_eval(w.value)
            except (ValueError, SyntaxError):
                continue
            guard = w.guards[0]
            cond = str(guard.get("condition") or "")
            if written == value or guard.get("kind") != "if" or not cond:
                continue
            try:
                node = ast.parse(cond.strip(), mode="eval").body
            except SyntaxError:
                continue
            held = bool(guard.get("polarity", True))
            tests = _one_flag_tests(node, held, by_attr, parsed, implied, out)
            if tests is None:
                continue
            if len(tests) > 1:  # "a and b" held on the defaults: one of them did not
                if all(now is True for _, _, now in tests):
                    for flag, _, _ in tests:
                        out[flag] = UNKNOWN
                    groups.append([flag for flag, _, _ in tests])
                continue
            flag, test, now = tests[0]
            spec = by_attr[flag]
            no_value = spec.action in NO_VALUE_ACTIONS or spec.nargs == "0"
            got = _implied_value(ast.unparse(test), not held, now, no_value)
            if got is not None:
                out[flag] = UNKNOWN if got is _SOME else got
    return out, groups


def _one_flag_tests(
    node: ast.expr,
    held: bool,
    by_attr: dict[str, FlagSpec],
    parsed: ParsedArgs,
    implied: dict[str, object],
    out: dict[str, object],
) -> list[tuple[str, ast.expr, bool]] | None:
    """Each test of ``node`` (one, or the terms of an ``and`` that ``held``) with its one
    flag and its truth on that flag's default; None when a test reads more than one name,
    a flag that is set, implied or without a known default, or has another shape."""
    terms = (
        node.values
        if held and isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And)
        else [node]
    )
    tests: list[tuple[str, ast.expr, bool]] = []
    for term in terms:
        names = {n.attr for n in ast.walk(term) if isinstance(n, ast.Attribute)}
        flag = next(iter(names)) if len(names) == 1 else ""
        spec = by_attr.get(flag)
        if spec is None or not spec.flags or not spec.default_known:
            return None
        if flag in parsed.values or flag in implied or flag in out:
            return None
        now = _default_truth(term, spec.default)
        if now is None:
            return None
        tests.append((flag, term, now))
    return tests


def _default_truth(node: ast.expr, default: object) -> bool | None:
    """The truth of a one-flag ``if`` (a bare flag, or the flag compared with constants) on
    the flag's default; None for any other shape."""
    if isinstance(node, ast.Attribute):
        return bool(default)
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return None
    other = node.comparators[0] if isinstance(node.left, ast.Attribute) else node.left
    consts = _constants(other)
    if consts is None:
        return None
    op = node.ops[0]
    if isinstance(op, ast.Eq | ast.Is):
        return len(consts) == 1 and default == consts[0]
    if isinstance(op, ast.NotEq | ast.IsNot):
        return len(consts) == 1 and default != consts[0]
    if isinstance(op, ast.In):
        return default in consts
    if isinstance(op, ast.NotIn):
        return default not in consts
    return None


def assumed_launch(
    store: Store,
    version: str,
    check: Check,
    ev: PathEvaluation,
    attrs: dict[str, Value],
    parsed: ParsedArgs,
    catalog: Catalog,
    facts: dict[str, Value],
    *,
    facts_sig: str | None = None,
) -> ImpliedLaunch | None:
    """The implied launch of ``check`` with its evaluation, when the user's command is not
    known (:func:`command_unknown`), ``ev`` (the check on what is known) does not fire, and
    the check fires or is undecided on the implied flags; None otherwise."""
    if ev.fired is True or not command_unknown(parsed, attrs, catalog):
        return None
    launch = implied_launch(ev, attrs, parsed, catalog)
    if launch is None:
        return None
    more, groups = _not_reset(store, version, check, launch.implied, parsed, catalog)
    if more:
        implied = {**launch.implied, **more}
        launch = _launch(attrs, parsed, catalog, implied, [*launch.either, *groups])
    launch.evaluation = evaluate_path(
        store, version, check, launch.attrs, facts, facts_sig=facts_sig
    )
    return None if launch.evaluation.fired is False else launch
