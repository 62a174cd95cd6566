"""Fixes for a registry lookup that missed: the registered alternatives of that release.

Start-up looks implementations up in registries SGLang fills with decorators and dicts
(``@register_fused_func("deepep", "flashinfer_cutedsl")``, ``ATTENTION_BACKENDS = {…}``);
ingest stores every registration of a release (``Store.registrations``). When the
located check's message printed the names it looked up ("Runner backend
MoeRunnerBackend.FLASHINFER_TRTLLM requires a fused func for a2a backend deepep, but
none is registered"), :func:`registry_edits` finds the registry holding those names and
proposes each registered entry that differs from the missing key in one name: another
runner registered for ``deepep`` (``--moe-runner-backend flashinfer_cutedsl``), or
another a2a backend registered for the runner (``--moe-a2a-backend none``). The flag
of a name is the one whose choices hold both the printed name and its replacement (of
several, the one the launch set to the printed name).

Each proposal cites the registration it rests on. It fixes the check by that
registration (the lookup then finds it), which :func:`registry_verdicts` says in the
edit's origin; the release's other checks re-check it like any fix.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kb.catalog_types import Catalog
from kb.store import Store
from service.engine.evaluate.params import snake_case
from service.engine.expr.interpreter import Value
from service.engine.fixes.intent import intent_cost, is_feature
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.propose import recheck_neighbours
from service.engine.flags.parse import ParsedArgs
from service.engine.locate.message_values import BoundValue

__all__ = ["RegistryEdit", "registry_edits", "registry_verdicts"]

#: registrations read for one printed name
MAX_ROWS = 400
#: alternatives proposed per crash
MAX_EDITS = 6


@dataclass(frozen=True)
class RegistryEdit:
    """Set ``attr`` to ``value``: ``value`` is registered with the other printed names in
    ``registry`` at ``citation`` (release:path:line). ``keep`` sets the flags of those
    other names to what the crash printed, where the launch as read does not already
    (a message posted without its command)."""

    attr: str
    value: str
    old: str
    registry: str
    keys: tuple[str, ...]
    citation: str
    keep: tuple[tuple[str, str], ...] = ()


def _names(bound: Iterable[BoundValue]) -> list[str]:
    """The names a message printed, as registries key them (an enum member by its
    lower-case name and its value)."""
    out: list[str] = []
    for b in bound:
        texts = []
        if b.enum is not None:
            texts.append(b.enum[1].lower())
        if isinstance(b.value, str) and (b.enum is None or "." not in b.value):
            texts.append(b.value)
        for t in texts:
            t = t.strip().strip("'\"")
            if t and len(t) <= 80 and t not in out:
                out.append(t)
    return out


def _hints(b: BoundValue) -> tuple[str, ...]:
    """Names the flag of a printed value may have: its enum class in snake case, and the
    printed expression's last name without ``_name``."""
    out = []
    if b.enum is not None:
        out.append(snake_case(b.enum[0]))
    stem = b.expr.rsplit(".", 1)[-1].removesuffix("_name")
    if re.fullmatch(r"[a-z_][a-z0-9_]{0,80}", stem):
        out.append(stem)
    return tuple(out)


def _registrations(store: Store, version: str, name: str) -> list[dict[str, Any]]:
    return store.registrations(version, key=name)[:MAX_ROWS]


def _flag_for(catalog: Catalog, old: str, new: str, attrs: dict[str, Value],
              hints: tuple[str, ...] = ()) -> str | None:
    """The attribute of the flag whose choices hold both names. Of several: the one named
    exactly like a hint (the printed enum's class: ``MoeRunnerBackend`` is
    ``moe_runner_backend``), else those ending like one (the printed expression,
    ``runner_backend``), then the one the launch set to ``old``, then the flag the others
    are variants of; None when that does not decide it."""
    hits = sorted({s.attr for s in catalog.flags
                   if s.choices and old in s.choices and new in s.choices})
    exact = [a for a in hits if a in hints]
    if len(exact) == 1:
        return exact[0]
    named = [a for a in hits if any(a.endswith(h) for h in hints)]
    hits = named or hits
    now = [a for a in hits if a in attrs and attrs[a].value == old]
    if len(now) == 1:
        return now[0]
    # the flag the others are variants of (``moe_runner_backend`` of
    # ``speculative_moe_runner_backend``), when the launch's values do not tell
    base = [a for a in hits if all(h.endswith(a) for h in hits)]
    return base[0] if len(base) == 1 else None


def registry_edits(store: Store, version: str, bound: list[BoundValue], catalog: Catalog,
                   attrs: dict[str, Value]) -> list[RegistryEdit]:
    """Registered alternatives to the key the message printed (see the module)."""
    names = _names(bound)
    if not names:
        return []
    hints_of = {n: _hints(b) for b in bound for n in _names([b])}
    rows_by_registry: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[tuple[str, str, int]] = set()
    for name in names:
        for row in _registrations(store, version, name):
            key = (row["registry"], row["path"], row["line"])
            if key not in seen:
                seen.add(key)
                rows_by_registry[row["registry"]].append(row)
    out: list[RegistryEdit] = []
    for registry, rows in sorted(rows_by_registry.items()):
        width = max(len(r["keys"]) for r in rows)
        if width > len(names) or width > 4:
            continue
        # the key the crash looked up: the printed names, one per position, each found at
        # its position in some registration, and not registered itself (the lookup missed)
        at = [{r["keys"][i] for r in rows if len(r["keys"]) > i} for i in range(width)]
        registered = {tuple(r["keys"]) for r in rows}
        missing = next((p for p in itertools.permutations(names, width)
                        if all(p[i] in at[i] for i in range(width)) and p not in registered),
                       None)
        if missing is None:
            continue
        for r in rows:
            keys = tuple(r["keys"])
            if len(keys) != len(missing):
                continue
            diff = [i for i in range(len(keys)) if keys[i] != missing[i]]
            if len(diff) != 1:
                continue
            old, new = missing[diff[0]], keys[diff[0]]
            attr = _flag_for(catalog, old, new, attrs, hints_of.get(old, ()))
            if attr is None:
                continue
            keep = tuple((a, k) for i, k in enumerate(keys) if i != diff[0]
                         for a in [_flag_for(catalog, k, k, attrs, hints_of.get(k, ()))]
                         if a is not None and (a not in attrs or attrs[a].value != k))
            edit = RegistryEdit(attr, new, old, registry, keys,
                                f"{version}:{r['path']}:{r['line']}", keep)
            if all((e.attr, e.value) != (attr, new) for e in out):
                out.append(edit)
    return out[:MAX_EDITS]


def registry_verdicts(store: Store, version: str, check: dict[str, Any], bound: list[BoundValue],
                      catalog: Catalog, parsed: ParsedArgs, attrs: dict[str, Value],
                      facts: dict[str, Value], *, facts_sig: str | None = None
                      ) -> tuple[list[Verdict], list[str]]:
    """Verdicts for :func:`registry_edits` (the check fixed by the registration; the
    release's neighbouring checks re-checked), and the registrations' citations."""
    verdicts: list[Verdict] = []
    citations: list[str] = []
    edits = registry_edits(store, version, bound, catalog, attrs)
    for e in edits:
        edit = Edit(set={**dict(e.keep), e.attr: e.value}, origin=(
            f"registered: {e.registry}{e.keys} at {e.citation}, so the lookup of "
            f"{e.value!r} in place of {e.old!r} finds it"), preference=0)
        v = Verdict(edit, True)
        recheck_neighbours(store, version, check, v, attrs, facts, catalog, facts_sig=facts_sig)
        verdicts.append(v)
        citations.append(e.citation)
    # clean first, then what keeps more of the launch (another runner for the user's a2a
    # backend before giving the a2a backend up)
    costs = {id(v): intent_cost(v.edit.set, v.edit.remove, parsed, catalog, attrs)
             for v in verdicts}
    by_attr = catalog.by_attr()
    # a printed name that asks for a feature (``deepep``) counts as asked for, when the
    # message came without its command
    off = {id(v): e.attr in by_attr and is_feature(by_attr[e.attr], e.old)
           and not is_feature(by_attr[e.attr], e.value) for v, e in zip(verdicts, edits, strict=True)}
    verdicts.sort(key=lambda v: (not v.ok, costs[id(v)].features, costs[id(v)].overridden,
                                 off[id(v)], len(v.trips)))
    return verdicts, citations
