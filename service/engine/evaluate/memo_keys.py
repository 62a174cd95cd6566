"""Memo keys' views of the values an evaluation reads: the value alone
(:func:`value_key`) or with its provenance (:func:`value_signature`), for the memo
tables of the path evaluation, the fold of earlier writes, the fix search and the rule
cards."""

from __future__ import annotations

from service.engine.expr.interpreter import Value


def value_key(v: object) -> str:
    """A memo key's view of one attribute: its value's ``repr`` ("?" when absent)."""
    if v is None:
        return "?"
    return repr(v.value) if isinstance(v, Value) else repr(v)


def value_signature(v: object) -> object:
    """A memo key's view of one input whose provenance matters too (a :class:`Result`
    lists its inputs with their provenance): value ``repr`` and provenance, "?" when absent."""
    if v is None:
        return "?"
    if not isinstance(v, Value):
        return (repr(v), None, None)
    # strings, not the Provenance itself: a str caches its hash, a dataclass recomputes it
    # on every lookup of a key holding it
    return (repr(v.value), v.provenance.kind, v.provenance.detail)
