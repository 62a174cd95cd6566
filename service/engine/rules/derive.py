"""Derived cards: every validation check of every ingested release, as a rule card.

Each qualifying check gives the conditions of a card
(:class:`~service.engine.rules.derived_checks.DerivedCheck`: how ``when`` and ``require``
are read from its guards and test is told in :mod:`service.engine.rules.derived_checks`).

The same normalised ``(when, require)`` in several releases (or several times in
one) is one card: its ``releases`` range covers the releases it appears in
(``!=`` excludes ingested releases in between that lack it), with a citation per
occurrence. Ids are ``d-`` + the first 10 hex digits of the SHA-256 of the pair,
so they are stable across runs and KBs.

:func:`derive_cards` caches the result in memory and in ``<kb>/rules/derived.jsonl``
(a header line with the cache key, then one card per line), keyed by the
releases' content hashes and :data:`DERIVATION_VERSION`; a KB with unchanged
releases never derives twice.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb.rules.cards import Card, FixHints, release_in, remember_reads
from kb.store import Store
from kb.versions import version_key
from service.engine.rules.derived_checks import DerivedCheck, derive_release

__all__ = [
    "DERIVATION_VERSION",
    "SourceInfo",
    "derivation_key",
    "derive_cards",
    "derive_cards_for",
    "derived_path",
    "derived_sources",
    "version_range",
]

DERIVATION_VERSION = "7"
_lock = threading.Lock()


class _Memo:
    """What this process already derived or read, per (KB path, derivation key)."""

    def __init__(self) -> None:
        self.derived: dict[tuple[str, str], Derived] = {}
        self.records: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.for_release: dict[tuple[str, str, str], list[Card]] = {}
        self.sources: dict[tuple[str, str], dict[str, dict[str, SourceInfo]]] = {}

    def clear(self) -> None:
        """Forget everything (the next call derives or reads the file cache again)."""
        self.derived.clear()
        self.records.clear()
        self.for_release.clear()
        self.sources.clear()


_memory = _Memo()


# ---------------------------------------------------------------------- text helpers


def _message_text(src: str | None) -> str | None:
    """Readable text of a message expression: literals joined, f-string fields kept as {x}."""
    if not src or not src.strip():
        return None
    text = src.strip()
    try:
        node = ast.parse(text if "\n" not in text else f"(\n{text}\n)", mode="eval").body
    except SyntaxError:
        return " ".join(text.split())

    def render(n: ast.AST) -> str:
        if isinstance(n, ast.Constant):
            return str(n.value)
        if isinstance(n, ast.JoinedStr):
            return "".join(render(v) for v in n.values)
        if isinstance(n, ast.FormattedValue):
            return "{" + ast.unparse(n.value) + "}"
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            return render(n.left) + render(n.right)
        return "{" + ast.unparse(n) + "}"

    return " ".join(render(node).split())


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _fix_hints(require: str) -> FixHints:
    """Edits the ``require`` text itself names: ``args.X is None`` -> remove X, ``== c`` -> set."""
    try:
        node = ast.parse(require, mode="eval").body
    except SyntaxError:
        return FixHints()
    terms = node.values if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) else [node]
    hints: dict[str, Any] = {"set": {}, "remove": []}

    def attr_of(n: ast.AST) -> str | None:
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "args":
            return n.attr
        return None

    for t in terms:
        if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and attr_of(t.operand):
            hints["remove"].append(attr_of(t.operand))
        elif isinstance(t, ast.Compare) and len(t.ops) == 1 and attr_of(t.left):
            right, op, attr = t.comparators[0], t.ops[0], attr_of(t.left)
            if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
                hints["remove"].append(attr)
            elif isinstance(op, ast.Eq) and isinstance(right, ast.Constant):
                hints["set"][attr] = right.value
    return FixHints.model_validate({k: v for k, v in hints.items() if v})


def version_range(present: list[str], all_releases: list[str]) -> str:
    """PEP 440 range over ``present``: ``>=lo,<=hi`` minus the ingested releases in between."""
    order = sorted(set(all_releases) | set(present), key=version_key)
    have = sorted(set(present), key=version_key)
    lo, hi = have[0], have[-1]
    inside = [r for r in order if version_key(lo) <= version_key(r) <= version_key(hi)]
    spec = f">={lo},<={hi}"
    return spec + "".join(f",!={r}" for r in inside if r not in have)


def _card(group: list[DerivedCheck], all_releases: list[str]) -> Card:
    first = max(group, key=lambda d: version_key(d.release))  # newest wording
    text = _message_text(first.message)
    digest = hashlib.sha256(f"{first.when}\n{first.require}".encode()).hexdigest()[:10]
    releases = version_range([d.release for d in group], all_releases)
    if text:
        title, message = _short(text), text
    else:
        title = _short(f"{first.function.rsplit('.', 1)[-1]} requires {first.require}")
        message = (
            f"bare {'AssertionError' if first.kind == 'assert' else 'raise'} in "
            f"{first.function}: requires `{first.require}`"
        )
    how = (
        "the assert's test" if first.kind == "assert" else "not (the innermost guard of the raise)"
    )
    rationale = (
        f"Derived from the {first.kind} in {first.function} "
        f"({first.path}:{first.start}-{first.end} in {first.release}); seen in "
        f"{', '.join(sorted({d.release for d in group}, key=version_key))}. "
        f"`when` is the call-site and enclosing guards, `require` is {how}."
    )
    return Card(
        id=f"d-{digest}",
        title=title,
        releases=releases,
        when=first.when,
        require=first.require,
        severity="error",
        message=message,
        rationale=rationale,
        citations=list(dict.fromkeys(d.citation for d in group)),
        fix_hints=_fix_hints(first.require),
        origin="derived",
    )


# ------------------------------------------------------------------------- caching


def derivation_key(store: Store) -> tuple[str, list[str]]:
    """(cache key, ingested releases): changes when any release is re-indexed."""
    rows = [r for r in store.releases() if r["status"] in ("indexed", "complete")]
    releases = sorted((r["version"] for r in rows), key=version_key)
    basis = json.dumps(
        [DERIVATION_VERSION, sorted((r["version"], r["content_hash"]) for r in rows)]
    )
    return hashlib.sha256(basis.encode()).hexdigest()[:24], releases


def derived_path(store: Store) -> Path:
    """Where derived cards are kept: ``<kb>/rules/derived.jsonl`` next to the index."""
    return store.path.parent / "rules" / "derived.jsonl"


@dataclass(frozen=True)
class SourceInfo:
    """Where a derived card comes from in one release, for the checker."""

    path: str
    start: int
    deps: tuple[str, ...]
    writes: bool


Derived = tuple[list[Card], dict[str, dict[str, SourceInfo]]]


def _read_raw(path: Path, key: str) -> list[dict[str, Any]] | None:
    """The stored records of ``path`` when its header carries ``key`` (JSON only: the cards
    are validated by their users, :func:`_cards_of` and :func:`derive_cards_for`)."""
    try:
        with path.open(encoding="utf-8") as fh:
            header = json.loads(fh.readline() or "{}")
            if header.get("_meta", {}).get("key") != key:
                return None
            records = [json.loads(line) for line in fh if line.strip()]
        for rec in records:
            rec["card"]["releases"]  # a record without a range is a bad file
            rec["reads"], rec["sources"]
        return records
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sources_of(records: list[dict[str, Any]]) -> dict[str, dict[str, SourceInfo]]:
    return {
        rec["card"]["id"]: {
            r: SourceInfo(v["path"], v["start"], tuple(v["deps"]), v["writes"])
            for r, v in rec["sources"].items()
        }
        for rec in records
    }


def _card_of(rec: dict[str, Any]) -> Card:
    card = Card.model_validate(rec["card"])
    remember_reads(card.when, card.require, frozenset(rec["reads"]))
    return card


def _read_file(path: Path, key: str) -> Derived | None:
    records = _read_raw(path, key)
    if records is None:
        return None
    try:
        return [_card_of(rec) for rec in records], _sources_of(records)
    except (ValueError, KeyError, TypeError):
        return None


def _write_file(
    path: Path, key: str, releases: list[str], derived: Derived, reads: dict[str, frozenset[str]]
) -> None:
    cards, sources = derived
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".derived-", suffix=".jsonl")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            meta = {
                "key": key,
                "version": DERIVATION_VERSION,
                "releases": releases,
                "cards": len(cards),
            }
            fh.write(json.dumps({"_meta": meta}) + "\n")
            for c in cards:
                rec = {
                    "card": c.model_dump(mode="json", by_alias=True, exclude_defaults=True),
                    "reads": sorted(reads[c.id]),
                    "sources": {
                        r: {
                            "path": i.path,
                            "start": i.start,
                            "deps": list(i.deps),
                            "writes": i.writes,
                        }
                        for r, i in sources[c.id].items()
                    },
                }
                fh.write(json.dumps(rec) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only KB still works; derivation just repeats in the next process


def _derived(store: Store, use_cache: bool = True) -> Derived:
    key, releases = derivation_key(store)
    mkey = (str(store.path), key)
    if use_cache:
        with _lock:
            hit = _memory.derived.get(mkey)
        if hit is not None:
            return hit
        cached = _read_file(derived_path(store), key)
        if cached is not None:
            with _lock:
                _memory.derived[mkey] = cached
            return cached
    groups: dict[tuple[str, str], list[DerivedCheck]] = {}
    for version in releases:
        for d in derive_release(store, version):
            groups.setdefault((d.when, d.require), []).append(d)
    cards: list[Card] = []
    sources: dict[str, dict[str, SourceInfo]] = {}
    reads: dict[str, frozenset[str]] = {}
    for group in groups.values():
        card = _card(group, releases)
        cards.append(card)
        reads[card.id] = group[0].reads
        remember_reads(card.when, card.require, group[0].reads)
        per: dict[str, SourceInfo] = {}
        for d in group:
            per.setdefault(d.release, SourceInfo(d.path, d.start, d.deps, d.writes))
        sources[card.id] = per
    result: Derived = (cards, sources)
    _write_file(derived_path(store), key, releases, result, reads)
    with _lock:
        _memory.derived[mkey] = result
    return result


def _records(store: Store) -> list[dict[str, Any]] | None:
    """The derived-card file's records for the KB as it is (cached in memory; None when
    the file is missing or stale: :func:`_derived` then derives)."""
    key, _ = derivation_key(store)
    mkey = (str(store.path), key)
    with _lock:
        hit = _memory.records.get(mkey)
    if hit is None:
        hit = _read_raw(derived_path(store), key)
        if hit is None:
            return None
        with _lock:
            _memory.records[mkey] = hit
    return hit


def derive_cards_for(store: Store, release: str) -> list[Card]:
    """The derived cards whose range holds ``release``, validated from the file cache one
    release at a time (a pre-flight lint of one release validates only its cards); the
    same cards :func:`derive_cards` filtered by :meth:`Card.applies_to` gives."""
    key, _ = derivation_key(store)
    with _lock:
        full = _memory.derived.get((str(store.path), key))
    records = None if full is not None else _records(store)
    if records is None:
        return [c for c in derive_cards(store) if c.applies_to(release)]
    mkey = (str(store.path), key, release)
    with _lock:
        hit = _memory.for_release.get(mkey)
    if hit is None:
        try:
            hit = [_card_of(rec) for rec in records if release_in(rec["card"]["releases"], release)]
        except (ValueError, KeyError, TypeError):
            return [c for c in derive_cards(store, use_cache=False) if c.applies_to(release)]
        with _lock:
            _memory.for_release[mkey] = hit
    return hit


def derive_cards(store: Store, *, use_cache: bool = True) -> list[Card]:
    """Derived cards of every ingested release (memory, then file cache, then derivation)."""
    return _derived(store, use_cache)[0]


def derived_sources(store: Store) -> dict[str, dict[str, SourceInfo]]:
    """card id -> release -> :class:`SourceInfo` (the check it was derived from there);
    from the file cache without validating the cards when it is fresh."""
    key, _ = derivation_key(store)
    with _lock:
        full = _memory.derived.get((str(store.path), key))
        hit = _memory.sources.get((str(store.path), key))
    if full is not None:
        return full[1]
    if hit is None:
        records = _records(store)
        if records is None:
            return _derived(store)[1]
        hit = _sources_of(records)
        with _lock:
            _memory.sources[(str(store.path), key)] = hit
    return hit
