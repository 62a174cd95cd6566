"""A check's fold plan cut to the writes that decide one attribute (:func:`plan_slice`).

The *slice* of one attribute is its writes in the plan and, transitively, the writes of
every attribute their guards and values read. No write outside the slice reads or writes
an attribute the slice reads, so folding the slice alone, in plan order, gives the
attribute exactly the value the whole fold gives it
(:mod:`~service.engine.evaluate.fold_slice` folds them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from kb.code_types import Check
from service.engine.cache import LRUCache
from service.engine.evaluate import chain, resolution
from service.engine.evaluate.guard_memo import sorted_reads
from service.engine.evaluate.literal_classes import Tests, uses_of
from service.engine.evaluate.path_classes import WritesInfo, writes_info

__all__ = ["Plan", "Slice", "plan_reads", "plan_slice", "write_reads"]

Plan = tuple[tuple[chain.Write, resolution.PreparedWrite], ...]


@dataclass(frozen=True)
class Slice:
    """The writes of a plan that decide one attribute (in plan order), every name they
    read, the attribute included (sorted), and a digest of the writes as the fold
    evaluates them: slices of other checks' plans with the same digest fold alike.

    Folding the slice decides every attribute in :attr:`decides` (the attribute and
    those its writes read, transitively), each exactly as the whole fold would.
    """

    writes: Plan
    reads: tuple[str, ...]
    ident: bytes
    decides: frozenset[str]
    #: do the writes keep the model paths' classes, and which facts must then be absent
    #: (:func:`~service.engine.evaluate.path_classes.writes_info`)
    paths: WritesInfo = field(init=False, repr=False, compare=False)
    #: how the writes' guards and values read each attribute they name: through tests
    #: against literals, or otherwise (:func:`~service.engine.evaluate.literal_classes.uses_of`)
    uses: Mapping[str, Tests | None] = field(init=False, repr=False, compare=False)
    #: per write, every name its value and guards read, sorted (``None``: a text not
    #: readable)
    write_reads: tuple[tuple[str, ...] | None, ...] = field(init=False, repr=False, compare=False)
    #: :attr:`reads` as a set
    read_set: frozenset[str] = field(init=False, repr=False, compare=False)
    #: the attributes the writes assign
    written: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "read_set", frozenset(self.reads))
        object.__setattr__(self, "written", frozenset(w.attr for w, _ in self.writes))
        object.__setattr__(self, "paths", writes_info(self.writes))
        object.__setattr__(self, "write_reads", tuple(write_reads(pw) for _, pw in self.writes))
        texts: dict[tuple[str, str | None], None] = {}
        for w, pw in self.writes:
            texts[(pw.value or "None", w.attr)] = None
            texts.update(((g, None), None) for g, _ in pw.all_guards(False))
        object.__setattr__(self, "uses", uses_of(texts))


# (id of the plan, attribute) -> (the plan, its slice); the plan is kept so that a reused
# id cannot answer for another plan
_SLICES: LRUCache[tuple[Plan, Slice]] = LRUCache("evaluation.fold_slices", 50_000)
# id of a plan -> (the plan, every name each of its writes reads)
_PLAN_READS: LRUCache[tuple[Plan, tuple[tuple[str, ...] | None, ...]]] = LRUCache(
    "evaluation.plan_reads", 4_096
)


def _ident(check: Check, writes: Plan) -> bytes:
    """A digest of this sequence of writes as ``check``'s fold evaluates them (a write in
    the checking function itself skips its call-site guards): equal for equal sequences."""
    shape = repr(
        [
            (w.path, w.line, w.attr, w.function == check.function and w.path == check.path)
            for w, _ in writes
        ]
    )
    return hashlib.blake2b(shape.encode(), digest_size=16).digest()


def write_reads(pw: resolution.PreparedWrite) -> tuple[str, ...] | None:
    """Every name the write's value and guards (call-site guards included) read, sorted
    (``None`` when a text cannot be read): one order for equal sets, so memo keys hold the
    values read in it."""
    out: set[str] = set()
    for text in (pw.value or "", *(g for g, _ in pw.all_guards(False))):
        if text:
            names = sorted_reads(text)
            if names is None:
                return None
            out.update(names)
    return tuple(sorted(out))


def plan_reads(plan: Plan) -> tuple[tuple[str, ...] | None, ...]:
    """Per write of ``plan``, :func:`write_reads`; cached per plan object."""
    got = _PLAN_READS.get(id(plan))
    if got is not None and got[0] is plan:
        return got[1]
    reads = tuple(write_reads(pw) for _, pw in plan)
    _PLAN_READS.put(id(plan), (plan, reads))
    return reads


def plan_slice(check: Check, plan: Plan, attr: str) -> Slice:
    """The slice of ``check``'s ``plan`` that decides ``attr`` (cached per plan object)."""
    key = (id(plan), attr)
    got = _SLICES.get(key)
    if got is not None and got[0] is plan:
        return got[1]
    reads = [frozenset(r or ()) for r in plan_reads(plan)]
    written = {w.attr for w, _ in plan}
    wanted = {attr}
    grew = True
    while grew:  # close ``wanted`` over the attributes its writes read
        grew = False
        for (w, _), names in zip(plan, reads, strict=True):
            if w.attr in wanted:
                new = (names & written) - wanted
                if new:
                    wanted |= new
                    grew = True
    keep = [i for i, (w, _) in enumerate(plan) if w.attr in wanted]
    read: set[str] = {attr}
    for i in keep:
        read |= reads[i]
    writes = tuple(plan[i] for i in keep)
    found = Slice(writes, tuple(sorted(read)), _ident(check, writes), frozenset(wanted))
    _SLICES.put(key, (plan, found))
    return found
