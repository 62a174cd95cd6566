"""A shipped incident's located check evaluated as the engine would: the tests' one route
from an eval incident to (check, parsed flags, attrs, facts, path evaluation)."""

from __future__ import annotations

from typing import Any

from kb.catalog_types import Catalog
from service.engine.evaluate.path_condition import base_attrs, evaluate_path
from service.engine.flags.parse import parse_argv
from service.engine.logparse.parse import parse_log
from service.engine.triage import Engine


def evaluated(engine: Engine, release: str, catalog: Catalog, inc: Any) -> tuple[Any, ...] | None:
    """(check, parsed, attrs, facts, evaluation) of ``inc``'s expected location in
    ``release``, or None when the release has no check at that line."""
    store = engine.store
    loc = inc.expected.location
    check = next(
        (c for c in store.checks(release, path=loc.path) if c.start_line == loc.start_line), None
    )
    if check is None:
        return None
    parsed = parse_argv(inc.command_argv(), catalog)
    attrs = base_attrs(catalog, parsed)
    facts, _, _ = engine.facts_for(
        parse_log(inc.crash_log), inc.hardware, inc.model, inc.model_arch
    )
    return check, parsed, attrs, facts, evaluate_path(store, release, check, attrs, facts)
