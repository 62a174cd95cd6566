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
from kb.code_types import Check
from kb.store import Store
from service.engine.evaluate.params import snake_case
from service.engine.expr.interpreter import Value
from service.engine.fixes.edits import edited_attrs
from service.engine.fixes.intent import intent_cost, is_feature
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.neighbours import recheck_neighbours
from service.engine.flags.parse import ParsedArgs
from service.engine.locate.message import BoundValue

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


def _flag_for(
    catalog: Catalog, old: str, new: str, attrs: dict[str, Value], hints: tuple[str, ...] = ()
) -> str | None:
    """The attribute of the flag whose choices hold both names. Of several: the one named
    exactly like a hint (the printed enum's class: ``MoeRunnerBackend`` is
    ``moe_runner_backend``), else those ending like one (the printed expression,
    ``runner_backend``), then the one the launch set to ``old``, then the flag the others
    are variants of; None when that does not decide it."""
    hits = sorted(
        {s.attr for s in catalog.flags if s.choices and old in s.choices and new in s.choices}
    )
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


def registry_edits(
    store: Store, version: str, bound: list[BoundValue], catalog: Catalog, attrs: dict[str, Value]
) -> list[RegistryEdit]:
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
        unregistered = {n for n in names if not any(n in r["keys"] for r in rows)}
        for missing in _missing_keys(names, at, registered, unregistered):
            made = _alternatives(catalog, attrs, hints_of, rows, missing, registry, version)
            out += [e for e in made if all((o.attr, o.value) != (e.attr, e.value) for o in out)]
            if made:
                break
    return out[:MAX_EDITS]


def _missing_keys(
    names: list[str], at: list[set[str]], registered: set[tuple[str, ...]], unregistered: set[str]
) -> list[tuple[str, ...]]:
    """The keys the crash may have looked up, most certain first: the printed names, one
    per position, each found at its position in some registration; else (a name the
    registry holds nowhere, like ``mooncake`` where no runner registers a fused function
    for it) in one position and the others found. Never a registered key (the lookup
    missed)."""
    width = len(at)
    strict = [
        p
        for p in itertools.permutations(names, width)
        if all(p[i] in at[i] for i in range(width)) and p not in registered
    ]
    if strict:
        return strict[:1]
    return [
        p
        for p in itertools.permutations(names, width)
        if width > 1
        and sum(p[i] in unregistered for i in range(width)) == 1
        and all(p[i] in at[i] or p[i] in unregistered for i in range(width))
    ][:4]


def _alternatives(
    catalog: Catalog,
    attrs: dict[str, Value],
    hints_of: dict[str, tuple[str, ...]],
    rows: list[dict[str, Any]],
    missing: tuple[str, ...],
    registry: str,
    version: str,
) -> list[RegistryEdit]:
    """The registrations of ``rows`` that differ from ``missing`` in one name, as edits."""
    out: list[RegistryEdit] = []
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
        keep = tuple(
            (a, k)
            for i, k in enumerate(keys)
            if i != diff[0]
            for a in [_flag_for(catalog, k, k, attrs, hints_of.get(k, ()))]
            if a is not None and (a not in attrs or attrs[a].value != k)
        )
        edit = RegistryEdit(
            attr, new, old, registry, keys, f"{version}:{r['path']}:{r['line']}", keep
        )
        if all((e.attr, e.value) != (attr, new) for e in out):
            out.append(edit)
    return out


def registry_verdicts(
    store: Store,
    version: str,
    check: Check,
    bound: list[BoundValue],
    catalog: Catalog,
    parsed: ParsedArgs,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    *,
    facts_sig: str | None = None,
) -> tuple[list[Verdict], list[str]]:
    """Verdicts for :func:`registry_edits` (the check fixed by the registration; the
    release's neighbouring checks re-checked), and the registrations' citations."""
    verdicts: list[Verdict] = []
    citations: list[str] = []
    edits = registry_edits(store, version, bound, catalog, attrs)
    for e in edits:
        edit = Edit(
            set={**dict(e.keep), e.attr: e.value},
            origin=(
                f"registered: {e.registry}{e.keys} at {e.citation}, so the lookup of "
                f"{e.value!r} in place of {e.old!r} finds it"
            ),
            preference=0,
        )
        v = Verdict(edit, True)
        recheck_neighbours(store, version, check, v, attrs, facts, catalog, facts_sig=facts_sig)
        verdicts.append(v)
        citations.append(e.citation)
    # clean first, then what keeps more of the launch (another runner for the user's a2a
    # backend before giving the a2a backend up)
    costs = {
        id(v): intent_cost(v.edit.set, v.edit.remove, parsed, catalog, attrs) for v in verdicts
    }
    by_attr = catalog.by_attr()
    # a printed name that asks for a feature (``deepep``) counts as asked for, when the
    # message came without its command
    off = {
        id(v): e.attr in by_attr
        and is_feature(by_attr[e.attr], e.old)
        and not is_feature(by_attr[e.attr], e.value)
        for v, e in zip(verdicts, edits, strict=True)
    }
    # The release's rule cards on each edit: one that violates a card ranks after the
    # others. Of the alternatives for the same printed name (every other a2a backend for
    # ``mooncake``) the one no card doubts comes first, whatever feature it switches to;
    # across names, what keeps more of the launch first. Without the command there is
    # nothing else to go by: the cards' doubts decide first.
    doubts = _card_doubts(store, version, verdicts, catalog, parsed, attrs, facts, facts_sig)
    bare = not parsed.values
    name_of = {id(v): e.attr for v, e in zip(verdicts, edits, strict=True)}
    group = {
        id(v): min(
            (
                costs[id(w)].features
                for w in verdicts
                if name_of[id(w)] == name_of[id(v)] and not doubts[id(w)][0]
            ),
            default=costs[id(v)].features,
        )
        for v in verdicts
    }
    verdicts.sort(
        key=lambda v: (
            not v.ok,
            doubts[id(v)][0],
            bare and doubts[id(v)][1],
            group[id(v)],
            doubts[id(v)][1],
            costs[id(v)].features,
            costs[id(v)].overridden,
            off[id(v)],
            len(v.trips),
        )
    )
    return verdicts, citations


def _card_doubts(
    store: Store,
    version: str,
    verdicts: list[Verdict],
    catalog: Catalog,
    parsed: ParsedArgs,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    facts_sig: str | None,
) -> dict[int, tuple[int, int]]:
    """Per verdict, ``(violated, undecided)``: the error rule cards of the release reading a
    flag the edit sets that its command violates, or cannot decide, and the launch as read
    did not. A registered alternative whose own validation may refuse it (``--moe-a2a-backend
    flashinfer`` needs attention DP equal to TP; a card that cannot tell on a command
    posted without its flags) ranks after one the release's cards accept."""
    from service.engine.rules.checker import cards_for, evaluate_cards

    out = {id(v): (0, 0) for v in verdicts}
    touched = {a for v in verdicts for a in v.edit.set}
    cards = [c for c in cards_for(store, version) if c.severity == "error" and c.reads & touched]
    if not cards:
        return out
    before = {
        r.card.id: r.verdict
        for r in evaluate_cards(
            store, version, attrs, facts, parsed, cards=cards, facts_sig=facts_sig
        )
    }
    for v in verdicts:
        mine = [c for c in cards if c.reads & set(v.edit.set)]
        after = evaluate_cards(
            store,
            version,
            edited_attrs(attrs, v.edit, catalog),
            facts,
            parsed,
            cards=mine,
            facts_sig=facts_sig,
        )
        new = [r.verdict for r in after if r.verdict != before.get(r.card.id)]
        out[id(v)] = (new.count("violated"), new.count("unknown"))
    return out
