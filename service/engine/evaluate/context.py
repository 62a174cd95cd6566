"""The located check and the inputs every later stage judges it with (:class:`CheckContext`).

Evaluation, fix proposal, repair, the rule cards and the LLM step all read the same few
values: the KB, the release, its flag catalog, the check, the parsed command, the
evaluation environment (``attrs``) and the facts, with the facts' memo key. They travel
together, frozen, instead of as ten positional arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.cache import facts_signature
from service.engine.expr.interpreter import Value
from service.engine.flags.parse import ParsedArgs

__all__ = ["CheckContext"]


@dataclass(frozen=True)
class CheckContext:
    """What judging ``check`` in ``release`` reads.

    ``argv`` is the command as the crashed process ran it (completed with flags its
    message printed), ``parsed`` that command parsed with ``catalog``, ``attrs`` the
    evaluation environment built from it and ``facts`` the hardware, model and message
    facts. ``facts_key`` is :func:`~service.engine.cache.facts_signature` of ``facts``: it
    keys every stage's memo tables (computed when not given). Stages never mutate
    ``attrs`` or ``facts``; an edited environment is a new mapping.
    """

    store: Store
    release: str
    catalog: Catalog
    check: Check
    argv: list[str]
    parsed: ParsedArgs
    attrs: dict[str, Value]
    facts: dict[str, Value]
    facts_key: str = field(default="")

    def __post_init__(self) -> None:
        if not self.facts_key:
            object.__setattr__(self, "facts_key", facts_signature(self.facts))
