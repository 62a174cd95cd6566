"""What the crash message printed, as facts and flag values for the evaluation.

:func:`~service.engine.locate.message.values.bind_message` gives each formatted expression
of the located check's message the value it printed. Here each is put where the
evaluator reads it, by what it is in the raising function (its locals and the parameters
SGLang fills from a flag substituted, :func:`~service.engine.evaluate.params.flag_params`):

* **a fact** when it reads no launch flag (``moe_intermediate_size`` from the
  checkpoint, ``weight_block_size_n``): pinned under its own name with provenance
  ``message``, so the condition reads 1536 where it read "unknown"; a printed value
  outranks the known-model table (it is what the crashed process held);
* **a flag value** when it is exactly one flag (``tp_size`` is ``--tp``): when the
  user's command does not set that flag, the printed value fills it in (a command
  posted without ``--tp 8`` still evaluates with 8); when it does, they are compared.
  A field the raising function assigns before the check (``self.quantization =
  quant_method`` in ``ModelConfig``) is the object's own, a fact
  (``model_config.quantization``), not the flag;
* **a derived value** otherwise (``moe_tp_size = tp_size // moe_ep_size //
  moe_dp_size``): not pinned, since a fix must be able to change it through its flags;
  the value the flags give is compared with the printed one and a difference is a note.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.conditions import DEFAULT_ARG_OBJECTS
from kb.store import Store
from service.engine.evaluate import params, source
from service.engine.evaluate.params import FlagTrace
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.expr.interpreter import UNKNOWN, Env, Provenance, Value, evaluate, fact_key
from service.engine.locate.message import BoundValue, bind_message

__all__ = ["MessageFacts", "PrintedValue", "held_at_crash", "message_facts", "printed_flags"]


@dataclass(frozen=True)
class PrintedValue:
    """One printed value and how the evaluation uses it: ``role`` is ``fact`` (pinned),
    ``flag`` (fills or confirms ``attr``), ``derived`` (computed from flags; compared)."""

    bound: BoundValue
    role: str
    attr: str | None = None
    note: str = ""


@dataclass
class MessageFacts:
    """The printed values, the facts and flag values they give, and the flag traces of
    the function's parameters (cited in the answer)."""

    printed: list[PrintedValue] = field(default_factory=list)
    facts: dict[str, Value] = field(default_factory=dict)
    attrs: dict[str, Value] = field(default_factory=dict)
    traces: list[FlagTrace] = field(default_factory=list)

    @property
    def bound(self) -> list[BoundValue]:
        """Every printed value, whatever its role."""
        return [p.bound for p in self.printed]

    @property
    def notes(self) -> list[str]:
        return [p.note for p in self.printed if p.note]


def _reads(expr: ast.expr, attrs: frozenset[str]) -> set[str]:
    """The server-args attributes (of ``attrs``) an expression (after substitution) reads."""
    return {
        n.attr
        for n in ast.walk(expr)
        if isinstance(n, ast.Attribute)
        and n.attr in attrs
        and isinstance(n.value, ast.Name)
        and n.value.id in DEFAULT_ARG_OBJECTS
    }


def message_facts(
    store: Store,
    version: str,
    check: Check,
    message: str | None,
    attrs: dict[str, Value],
    user_set: set[str],
) -> MessageFacts:
    """Bind ``message`` (the log's) to ``check``'s message and sort the values (see module)."""
    out = MessageFacts()
    bound = bind_message(check.message, message)
    if not bound:
        return out
    fns = store.functions_at(version, check.path, check.start_line)
    fn = fns[0] if fns else None
    local = dict(source.locals_before(store, version, fn, check.start_line))
    traced = params.traced_params(store, version, fn, check.path)
    local.update(params.flag_params(store, version, fn, check.path, local))
    out.traces = list(traced.values())
    for d in params.derived_params(store, version, fn, check.path).values():
        out.traces += [t for t in d.steps if t not in out.traces]
    derived: list[tuple[BoundValue, ast.expr]] = []
    for b in bound:
        try:
            expr = ast.parse(
                params.rename_fields(store, version, fn, check, source.substitute(b.expr, local)),
                mode="eval",
            ).body
        except SyntaxError:
            continue
        reads = _reads(expr, params.server_args_attrs(store, version))
        prov = Provenance("message", b.evidence)
        if not reads:
            out.facts[fact_key(ast.unparse(expr) if _own(expr) else b.expr)] = Value(b.value, prov)
            out.printed.append(PrintedValue(b, "fact"))
            continue
        if isinstance(expr, ast.Attribute) and len(reads) == 1:
            attr = expr.attr
            have = attrs.get(attr)
            if attr not in user_set:
                out.attrs[attr] = Value(b.value, prov)
                out.printed.append(PrintedValue(b, "flag", attr))
            elif have is not None and have.value != b.value:
                out.printed.append(
                    PrintedValue(
                        b,
                        "flag",
                        attr,
                        note=(
                            f"the message printed {b.expr}={b.text}, but the command sets "
                            f"{attr} to {have.value!r}: the log may be of another launch"
                        ),
                    )
                )
            else:
                out.printed.append(PrintedValue(b, "flag", attr))
            continue
        derived.append((b, expr))
    for b, expr in derived:  # after the flags the message filled in
        solved = _solve(b, expr, attrs, out.attrs, user_set)
        if solved is None and _holds_own(expr):
            # the launch's flags are not known: the printed value is pinned as it stands
            out.facts[fact_key(b.expr)] = Value(b.value, Provenance("message", b.evidence))
            out.printed.append(PrintedValue(b, "fact"))
            continue
        if solved is not None:
            out.facts[solved[0]] = solved[1]
        out.printed.append(PrintedValue(b, "derived", note=_compare(b, expr, attrs, out.attrs)))
    return out


def _holds_own(expr: ast.expr) -> bool:
    """Does ``expr`` read a value of the raising object's own (``fused_moe.intermediate_size``
    of :func:`~service.engine.evaluate.params.formula_for`) besides flags?"""
    return any(_own(n) for n in ast.walk(expr) if isinstance(n, ast.Attribute))


def _solve(
    b: BoundValue,
    expr: ast.expr,
    attrs: dict[str, Value],
    filled: dict[str, Value],
    user_set: set[str],
) -> tuple[str, Value] | None:
    """``(fact key, value)`` of the object's own value in a printed derived value: the
    message printed ``intermediate_size_per_partition = 384`` and SGLang computes it as
    ``fused_moe.intermediate_size // (tp_size // ep_size // moe_dp_size)``; with the
    launch's ``--tp 2`` the checkpoint's value is 384 × 2 = 768. Only ``own // flags``,
    ``own / flags`` and ``own * flags`` are solved, and only when a flag the divisor reads
    was set by the command or printed (a default alone does not say how the crashed process
    ran)."""
    if not (
        isinstance(expr, ast.BinOp)
        and isinstance(expr.op, ast.FloorDiv | ast.Div | ast.Mult)
        and _own(expr.left)
        and isinstance(b.value, int)
        and not isinstance(b.value, bool)
    ):
        return None
    reads = {n.attr for n in ast.walk(expr.right) if isinstance(n, ast.Attribute)}
    if not reads & (user_set | set(filled)):
        return None
    try:
        k = evaluate(ast.unparse(expr.right), Env({**attrs, **filled})).value
    except Exception:  # not computable here: nothing solved
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        return None
    if isinstance(expr.op, ast.Mult):
        if b.value % k:
            return None
        value, how = b.value // k, f"{b.value} / {k}"
    else:
        value, how = b.value * k, f"{b.value} × {k}"
    name = ast.unparse(expr.left)
    return fact_key(name), Value(
        value,
        Provenance(
            "message",
            (
                f"{b.evidence}; {name} = {how} = {value} (the printed {b.expr} times the launch's "
                f"{ast.unparse(expr.right).replace('server_args.', '')})"
            ),
        ),
    )


def _own(expr: ast.expr) -> bool:
    """Is ``expr`` a field the raising object holds itself (``model_config.quantization``,
    renamed by :func:`~service.engine.evaluate.params.rename_fields`)?"""
    return (
        isinstance(expr, ast.Attribute)
        and isinstance(expr.value, ast.Name)
        and expr.value.id not in DEFAULT_ARG_OBJECTS
    )


def _compare(
    b: BoundValue, expr: ast.expr, attrs: dict[str, Value], filled: dict[str, Value]
) -> str:
    """A note when the flags give ``expr`` a value other than the printed one ("" else)."""
    try:
        got = evaluate(ast.unparse(expr), Env({**attrs, **filled})).value
    except Exception:  # not computable here: nothing to compare
        return ""
    if got is UNKNOWN or got == b.value:
        return ""
    return (
        f"the message printed {b.expr}={b.text}, but the flags give {got!r}: "
        "a value set outside the command line (a config file, an environment variable, "
        "SGLang's own adjustment) may differ"
    )


def held_at_crash(ev: PathEvaluation, printed: MessageFacts) -> PathEvaluation:
    """``ev`` with the crash as evidence: the message printed this check's own values, so
    the check raised and every piece of its path held with the flags it ran with. When no
    piece is decided false (the flags as read agree with the crash), the undecided pieces
    are taken to have held and the check fired, said in a caveat. A fix is still judged
    by the evaluation alone (:mod:`service.engine.fixes.propose` re-evaluates the edited
    flags): only the check's own test being decided false counts there."""
    if ev.fired is not UNKNOWN or not printed.printed or any(p.holds is False for p in ev.parts):
        return ev
    undecided = [p for p in ev.parts if p.holds is UNKNOWN]
    texts = ", ".join(f"`{p.condition[:60]}`" for p in undecided[:3])
    return replace(
        ev,
        fired=True,
        caveats=[
            *ev.caveats,
            (
                f"the message printed this check's own values, so it raised: {texts} held at the "
                "crash though the flags alone do not decide it"
            ),
        ],
    )


def printed_flags(printed: MessageFacts, catalog: Catalog) -> list[str]:
    """The flags the message printed that the command did not set, other than their
    defaults, as arguments (``["--tp-size", "8"]``): the crashed process ran with them, so
    a fix's full command keeps them."""
    by_attr = catalog.by_attr()
    out: list[str] = []
    for attr, value in printed.attrs.items():
        spec = by_attr.get(attr)
        if spec is None or not spec.flags or spec.action in ("store_true", "store_false"):
            continue
        if spec.default_known and spec.default == value.value:
            continue
        if isinstance(value.value, bool) or not isinstance(value.value, int | float | str):
            continue
        out += [spec.flags[0], str(value.value)]
    return out
