"""The attributes one card's evaluation read, so that its verdict can serve other commands.

A rule card's dependencies (:func:`~service.engine.rules.release_cards.card_entry`) are
every attribute its conditions, and the earlier writes folded in for them, *may* read. A
fix candidate that changes one of them re-judges the card, although ``when`` usually
stops at its first false operand and reads two or three. :class:`AttrReads` records what
was actually read (value and provenance, or absence), and :func:`attrs_match` tells
whether other attributes answer those reads alike: then the evaluation, which is
deterministic in what it reads, gives the same verdict.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from service.engine.evaluate.literal_classes import Tests, answers_signature
from service.engine.evaluate.memo_keys import value_key, value_signature
from service.engine.evaluate.path_classes import class_signature
from service.engine.expr.interpreter import Value
from service.engine.expr.trace import interned

__all__ = ["CLASS_MARK", "TESTS_MARK", "VALUE_MARK", "AttrReads", "attrs_match"]

#: suffix of a recorded read's key when the read is of the attribute's class
#: (:mod:`~service.engine.evaluate.path_classes`)
CLASS_MARK = "#class"
#: infix of a recorded read's key when the read is of the answers to tests against
#: literals (:mod:`~service.engine.evaluate.literal_classes`): ``attr#tests<n>``
TESTS_MARK = "#tests"
#: suffix of a recorded read's key when the read is of the value alone, not how it was
#: given (one the verdict does not show: evaluations read values only)
VALUE_MARK = "#value"
#: such a key -> (the attribute, its tests); one key per attribute and set of tests
_TESTED: dict[str, tuple[str, Tests]] = {}
_TEST_KEYS: dict[tuple[str, Tests], str] = {}


def _tests_key(name: str, tests: Tests) -> str:
    key = _TEST_KEYS.get((name, tests))
    if key is None:
        key = _TEST_KEYS[(name, tests)] = f"{name}{TESTS_MARK}{len(_TEST_KEYS)}"
        _TESTED[key] = (name, tests)
    return key


#: (attribute, its signature) per read, in first-read order
Reads = tuple[tuple[str, object], ...]


#: equal read tuples, each stored once (see :func:`~service.engine.expr.trace.interned`)
_INTERNED: dict[Reads, Reads] = {}


class AttrReads(Mapping[str, Value]):
    """``base`` (read-only) recording the signature of each attribute read in :attr:`reads`.

    Iterating or sizing the whole mapping sets :attr:`whole`: the evaluation then
    depends on every attribute and its record must not be reused elsewhere.
    """

    __slots__ = ("base", "reads", "whole")

    def __init__(self, base: Mapping[str, Value]) -> None:
        self.base = base
        self.reads: dict[str, object] = {}
        self.whole = False

    def _read(self, key: str) -> Value | None:
        found = self.base.get(key)
        if key not in self.reads:
            self.reads[key] = value_signature(found)
        return found

    def get(self, key: str, default: Any = None) -> Any:
        found = self._read(key)
        return default if found is None else found

    def __getitem__(self, key: str) -> Value:
        found = self._read(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._read(key) is not None

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self.base)

    def __len__(self) -> int:
        self.whole = True
        return len(self.base)

    def snapshot(
        self,
        classed: frozenset[str] = frozenset(),
        tested: Mapping[str, Tests] | None = None,
        *,
        shown: Collection[str] | None = None,
    ) -> Reads:
        """The reads so far, as one tuple shared with every equal one (a memo keys many).

        A read of an attribute of ``classed`` is kept as its class (key ``attr#class``),
        one of ``tested`` as the answers to its tests (key ``attr#tests<n>``; see
        :mod:`~service.engine.rules.value_classes`). With ``shown`` (the attributes the
        verdict shows, how they were given included), the others are kept as their values
        alone (key ``attr#value``): the evaluation reads values only."""
        items = tuple(self.reads.items())
        if classed or tested or shown is not None:
            tested = tested or {}

            def kept(k: str) -> str:
                if k in classed:
                    return k + CLASS_MARK
                if k in tested:
                    return _tests_key(k, tested[k])
                return k + VALUE_MARK if shown is not None and k not in shown else k

            items = tuple(
                (k, s) if (key := kept(k)) == k else (key, _answer(key, self.base))
                for k, s in items
            )
        return interned(_INTERNED, items)


def _answer(key: str, attrs: Mapping[str, Value]) -> object:
    """What ``attrs`` answer to one recorded read: the class, the values alone, the answers
    to the tests or (a plain attribute name) the value with its provenance."""
    if key.endswith(CLASS_MARK):
        return class_signature(attrs, key[: -len(CLASS_MARK)])
    if key.endswith(VALUE_MARK):
        return value_key(attrs.get(key[: -len(VALUE_MARK)]))
    tested = _TESTED.get(key)
    if tested is not None:
        return answers_signature(attrs.get(tested[0]), tested[1])
    return value_signature(attrs.get(key))


def attrs_match(reads: Reads, attrs: Mapping[str, Value], sigs: dict[str, object]) -> bool:
    """Do ``attrs`` answer every recorded read alike? (``sigs``: their signatures so far,
    one cache per mapping.)"""
    for key, sig in reads:
        current = sigs.get(key)
        if current is None:
            current = sigs[key] = _answer(key, attrs)
        if current != sig:
            return False
    return True
