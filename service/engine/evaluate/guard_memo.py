"""The guards and values of folded writes, evaluated through a memo keyed on the values
they read (:func:`holds`, :func:`value_of`).

A fold evaluates the same guard texts again and again, for commands and fix candidates
that differ in a flag or two. Each answer is memoised on the text and the values of the
attributes it reads: in a per-evaluation ``memo`` and, with the facts it read, in a
process-wide table shared by every evaluation under facts that answer those reads alike.
A mutable result is never shared.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from kb.errors import UnsafeExpression
from service.engine.cache import on_clear_all
from service.engine.evaluate.memo_keys import value_key
from service.engine.evaluate.pieces import all_hold, piece_holds
from service.engine.expr.decide import decide, decide_value
from service.engine.expr.interpreter import UNKNOWN, Env, referenced_names
from service.engine.expr.trace import FactsTrace

__all__ = ["holds", "sorted_reads", "value_of"]

_MISSING = object()


def _safe_truth(cond: str, env: Env) -> object:
    try:
        return decide(cond, env)
    except UnsafeExpression:  # e.g. a generator or walrus in SGLang's guard: undecidable here
        return UNKNOWN


@functools.lru_cache(maxsize=16384)
def sorted_reads(cond: str) -> tuple[str, ...] | None:
    """The attributes ``cond`` reads, sorted (None when it cannot be read)."""
    try:
        return tuple(sorted(referenced_names(cond)))
    except Exception:  # unparsable: the evaluator decides (unknown)
        return None


@functools.lru_cache(maxsize=16384)
def _guards_read(guards: tuple[tuple[str, bool], ...]) -> tuple[str, ...] | None:
    """The attributes a write's guards read, sorted (None when one cannot be read)."""
    out: set[str] = set()
    for cond, _ in guards:
        names = sorted_reads(cond)
        if names is None:
            return None
        out.update(names)
    return tuple(sorted(out))


def _on_reads(
    head: tuple[object, ...],
    names: tuple[str, ...] | None,
    env: Env,
    memo: dict[tuple[Any, ...], object] | None,
    compute: Callable[[], object],
) -> object:
    """``compute()`` (an evaluation in ``env``), memoised in ``memo`` (one per set of facts)
    under ``head`` and the values of the attributes ``names`` (all it reads; None: not
    known, no memo); a mutable result is never shared."""
    if memo is None or names is None:
        return compute()
    attrs = env.attrs
    # ``head`` determines ``names``: their values alone complete the key
    key: tuple[object, ...] = (*head, tuple(map(value_key, map(attrs.get, names))))
    facts = env.facts
    if isinstance(facts, FactsTrace):  # the facts read travel with the memoised answer
        key = (_TRACED, *key)
        found = memo.get(key, _MISSING)
        if found is _MISSING:  # another evaluation's answer, if these facts answer alike
            variants = _SHARED.get(key, ())
            found = next((f for f in variants if facts.answers_alike(f[1])), _MISSING)
            if found is not _MISSING:
                memo[key] = found
        if found is not _MISSING:
            value, reads = cast(tuple[object, Any], found)
            facts.replay(reads)
            return value
        saved = facts.frame()
        value = compute()
        reads = facts.merge(saved)
        if value is UNKNOWN or isinstance(value, _SHAREABLE):
            memo[key] = (value, reads)
            if len(_SHARED) >= _SHARED_MAX:
                _SHARED.clear()
            _SHARED[key] = (*_SHARED.get(key, ()), (value, reads))[-_SHARED_VARIANTS:]
        return value
    hit = memo.get(key, _MISSING)
    if hit is _MISSING:
        hit = compute()
        if hit is UNKNOWN or isinstance(hit, _SHAREABLE):
            memo[key] = hit
    return hit


_TRACED = object()  # heads the memo keys of answers stored with the facts they read

# guard truths and values across evaluations: (text, values read) -> (answer, facts read)
# per way the facts answered; a plain dict (one lookup, no lock: entries are pure),
# emptied when full
_SHARED: dict[tuple[Any, ...], tuple[tuple[object, Any], ...]] = {}
_SHARED_MAX = 200_000
_SHARED_VARIANTS = 8
on_clear_all(_SHARED.clear)


_SHAREABLE = (type(None), bool, int, float, str, bytes)


def _truth(cond: str, env: Env, memo: dict[tuple[Any, ...], object] | None) -> object:
    """``evaluate(cond).truth``, memoised on the values of the attributes it reads."""
    return _on_reads((cond,), sorted_reads(cond), env, memo, lambda: _safe_truth(cond, env))


def holds(
    guards: tuple[tuple[str, bool], ...], env: Env, memo: dict[tuple[Any, ...], object] | None
) -> object:
    """Whether all of a write's ``guards`` (condition, polarity) hold: True / False / UNKNOWN,
    memoised as a whole on the values of the attributes they read (one lookup per write)."""
    if len(guards) < 2:
        return piece_holds(_truth(guards[0][0], env, memo), guards[0][1]) if guards else True
    return _on_reads(
        ("holds", guards),
        _guards_read(guards),
        env,
        memo,
        lambda: _all_hold(guards, env, memo),
    )


def _all_hold(
    guards: tuple[tuple[str, bool], ...], env: Env, memo: dict[tuple[Any, ...], object] | None
) -> object:
    """:func:`all_hold` of the guards' pieces, stopping at the first that fails (the guards
    after it are not read: their facts cannot change the answer)."""
    pieces: list[object] = []
    for cond, pol in guards:
        pieces.append(piece_holds(_truth(cond, env, memo), pol))
        if pieces[-1] is False:
            break
    return all_hold(pieces)


def _safe_value(text: str, env: Env) -> object:
    try:
        return decide_value(text, env)
    except UnsafeExpression:
        return UNKNOWN


def value_of(text: str, env: Env, memo: dict[tuple[Any, ...], object] | None) -> object:
    """``evaluate(text).value`` (UNKNOWN when outside the whitelist), memoised as
    :func:`_truth` is."""
    return _on_reads(("=", text), sorted_reads(text), env, memo, lambda: _safe_value(text, env))
