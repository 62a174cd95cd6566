"""Companion flags: complete a partial set of related flags the way SGLang would.

Some checks guard a group of flags that SGLang fills in itself, but only as a whole:
0.5.x ``_handle_speculative_decoding`` asserts that ``--speculative-eagle-topk`` and
``--speculative-num-draft-tokens`` are unset when ``--speculative-num-steps`` is, then
assigns all three from ``auto_choose_speculative_params(self)``. A user who sets
``--speculative-eagle-topk 4`` alone trips the assert. Dropping their flag passes, but
so does adding the missing companions, which keeps what they asked for.

The group is the tuple the check's function assigns from a call right after the check
(:func:`service.engine.fixes.edits._choice_sites`). When the user set some of its
attributes and not others, the candidates are, in order:

1. each value tuple SGLang can choose that agrees with every value the user set: the
   one the call evaluates to for these flags and facts
   (:func:`~service.engine.evaluate.symbolic.call_value`), then the literal tuples the
   helper returns (``return (5, 4, 8)``), in source order; the candidate sets only the
   attributes the user left unset (``--speculative-num-steps 5`` for ``topk 4, draft
   8``: SGLang's own choice for a top-k of 4);
2. the tuple the call evaluates to, restricted to the unset attributes, keeping the
   user's values (the closest SGLang choice when no tuple agrees).

Values that are None or unknown are never offered. Every candidate is verified like any
other (the check, then its neighbours); nothing here is a known answer.
"""

from __future__ import annotations

import ast

from kb.store import Store
from service.engine.cache import cached, release_key
from service.engine.evaluate import chain
from service.engine.evaluate.symbolic import call_value, function_named
from service.engine.expr.interpreter import UNKNOWN, Env
from service.engine.flags.parse import ParsedArgs

__all__ = ["companion_sets", "literal_returns"]

#: consistent tuples offered per choice site
MAX_CONSISTENT = 2


def literal_returns(
    store: Store, version: str, call_src: str, width: int
) -> list[tuple[object, ...]]:
    """The constant tuples of ``width`` values (a constant when ``width`` is 1) that the
    helper ``call_src`` calls can return, in source order (cached per release)."""
    try:
        call = ast.parse(call_src.strip(), mode="eval").body
    except SyntaxError:
        return []
    if not isinstance(call, ast.Call):
        return []
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if not name:
        return []

    def build() -> list[tuple[object, ...]]:
        fn = function_named(store, version, name)
        node = chain.function_ast(store, version, fn) if fn is not None else None
        if node is None:
            return []
        found: list[tuple[int, tuple[object, ...]]] = []
        for stmt in ast.walk(node):
            if not isinstance(stmt, ast.Return) or stmt.value is None:
                continue
            elts = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
            consts = [e.value for e in elts if isinstance(e, ast.Constant)]
            if len(elts) == width and len(consts) == width:
                found.append((stmt.lineno, tuple(consts)))
        out: list[tuple[object, ...]] = []
        for _, values in sorted(found, key=lambda p: p[0]):
            if values not in out:
                out.append(values)
        return out

    return cached(release_key(store, version, f"companions:returns:{name}:{width}"), build)


def _usable(value: object) -> bool:
    return value is not None and value is not UNKNOWN


def companion_sets(
    store: Store, version: str, sites: list[tuple[list[str], str]], parsed: ParsedArgs, env: Env
) -> list[tuple[dict[str, object], str, bool]]:
    """(attributes to set, origin, whether the whole tuple is one SGLang chooses) completing
    each partially set choice group (module docstring), best first, without duplicates."""
    out: list[tuple[dict[str, object], str, bool]] = []
    for names, call in sites:
        mine = [n for n in names if n in parsed.values]
        unset = [n for n in names if n not in parsed.values]
        if not mine or not unset:
            continue
        value = call_value(store, version, call, env)
        # the values SGLang would choose, one per name (None: not known)
        evaluated: tuple[object, ...] | None = None
        if len(names) == 1:
            evaluated = (value,) if value is not UNKNOWN else None
        elif isinstance(value, tuple | list) and len(value) == len(names):
            evaluated = tuple(value)
        tuples = [evaluated] if evaluated is not None else []
        tuples += [t for t in literal_returns(store, version, call, len(names)) if t not in tuples]
        users = ", ".join(" ".join(parsed.values[n].raw) for n in mine)
        consistent = 0
        for values in tuples:
            chosen = dict(zip(names, values, strict=True))
            if any(chosen[n] != parsed.values[n].value for n in mine):
                continue
            add = {n: chosen[n] for n in unset}
            if not all(_usable(v) for v in add.values()):
                continue
            out.append(
                (
                    add,
                    f"add the companion flags with the values SGLang chooses with "
                    f"{users} ({call} can return {values!r})",
                    True,
                )
            )
            consistent += 1
            if consistent >= MAX_CONSISTENT:
                break
        if evaluated is not None:
            add = {n: v for n, v in zip(names, evaluated, strict=True) if n in unset}
            if all(_usable(v) for v in add.values()):
                out.append(
                    (
                        add,
                        f"add the companion flags SGLang would choose ({call}), keeping {users}",
                        False,
                    )
                )
    unique: dict[tuple[tuple[str, str], ...], tuple[dict[str, object], str, bool]] = {}
    for item in out:
        unique.setdefault(tuple(sorted((k, repr(v)) for k, v in item[0].items())), item)
    return list(unique.values())
