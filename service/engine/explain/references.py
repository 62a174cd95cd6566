"""The references an answer cites beside the check: each attribute's declaration, help
and earlier writes, and the lines that pass a function's parameter from a flag."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kb.catalog_types import Catalog
from kb.store import Store
from service.engine.answer import Reference
from service.engine.cache import cached, release_key
from service.engine.evaluate.params import FlagTrace

__all__ = ["references"]


def references(
    store: Store,
    version: str,
    attrs: set[str],
    catalog: Catalog,
    traces: Sequence[FlagTrace] = (),
) -> list[Reference]:
    """Declaration, ``--help`` and up to three writes of the first six of ``attrs`` (sorted),
    then each parameter trace (``moe_ep_size`` is passed ``cfg.ep_size`` at path:line)."""
    refs: list[Reference] = []
    by_attr = catalog.by_attr()
    for attr in sorted(attrs)[:6]:
        decl = catalog.declaration(attr)
        if decl is not None:
            refs.append(
                Reference(
                    kind="declaration",
                    citation=f"{version}:{decl.path}:{decl.line}",
                    text=f"{attr}: {decl.annotation} = {decl.default_src}",
                )
            )
        spec = by_attr.get(attr)
        if spec is not None and spec.line:
            refs.append(
                Reference(
                    kind="help",
                    citation=f"{version}:{spec.path}:{spec.line}",
                    text=f"{' / '.join(spec.flags)}: {(spec.help or '')[:160]}",
                )
            )
        for w in _writes(store, version, attr):
            refs.append(
                Reference(
                    kind="write",
                    citation=f"{version}:{w['path']}:{w['line']}",
                    text=f"{attr} = {(w['value'] or '')[:80]}",
                )
            )
    for t in traces:
        if t.how != "declared":
            refs.append(
                Reference(kind="passes", citation=t.citation, text=f"{t.name} is {t.attr}: {t.how}")
            )
    return refs


def _writes(store: Store, version: str, attr: str) -> list[dict[str, Any]]:
    return cached(
        release_key(store, version, f"ref-writes:{attr}"),
        lambda: store.refs(version, attr, kinds=("write", "declare"))[:3],
    )
