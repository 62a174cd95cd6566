"""Derived cards: every validation check of every ingested release, as a rule card.

For each ``assert``/``raise`` in the validation surface (``sglang/srt/server_args.py``
and ``sglang/srt/arg_groups/``):

* ``when`` is the AND of the function's reach condition (call sites across the
  surface, see :mod:`service.engine.rules.callsites`) and the check's guards, each negated where its
  polarity is false (``else`` branches, early exits);
* ``require`` is the assert's test. A ``raise`` has no test: its innermost guard
  is what decides it, so ``require`` is ``not (<innermost guard>)`` and ``when``
  holds the outer guards only. (The alternative, ``when`` = all guards and
  ``require`` = ``False``, would make every such card read as "never allowed"
  and would give the lint nothing to aim a fix at.) A raise with no guard of its
  own is skipped: reaching it is the whole condition.

Local variables are substituted by the expressions assigned to them earlier in
the function (``model_arch`` stays a fact), then conditions are normalised with
:func:`~service.engine.expr.interpreter.normalize` (``self.X``/``cfg.X``/
``server_args.X``/``resolved_view(server_args).X`` -> ``args.X``). Only checks
whose normalised conditions read at least one public ``args.X`` (internal
``_state`` fields do not count) and pass the evaluator's whitelist become cards;
bare re-raises inside ``except`` blocks are not checks and are skipped.

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
import functools
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from kb.errors import UnsafeExpression
from kb.rules.cards import Card, helper_reads, release_in, remember_reads
from kb.store import Store
from service.engine.evaluate import chain
from service.engine.evaluate.path_condition import fold_plan
from service.engine.expr.interpreter import normalize, referenced_names, validate
from service.engine.rules.callsites import ARG_OBJECTS, reach_condition, with_locals

__all__ = [
    "DERIVATION_VERSION",
    "DerivedCheck",
    "SourceInfo",
    "derivation_key",
    "derive_cards",
    "derive_cards_for",
    "derive_release",
    "derived_path",
    "derived_sources",
    "qualifying_checks",
    "version_range",
]

DERIVATION_VERSION = "4"
_lock = threading.Lock()
_memory: dict[tuple[str, str], Any] = {}


@dataclass(frozen=True)
class DerivedCheck:
    """One qualifying check of one release, with its normalised card conditions."""

    when: str
    require: str
    release: str
    citation: str
    check_id: int
    kind: str
    function: str
    path: str
    start: int
    end: int
    bare: bool
    message: str | None
    reads: frozenset[str] = frozenset()
    deps: tuple[str, ...] = ()  # reads + what the earlier writes folded in for them read
    writes: bool = False  # does any earlier write of a read attribute exist?


# ------------------------------------------------------------------------ one check


@functools.lru_cache(maxsize=32768)
def _piece(text: str) -> tuple[str, frozenset[str], bool] | None:
    """(normalised text, attributes read, needs parentheses under ``and``) or None if refused."""
    try:
        out = normalize(text, ARG_OBJECTS)
        validate(out)
        node = ast.parse(out, mode="eval").body
    except (UnsafeExpression, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    loose = isinstance(node, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda))
    return out, referenced_names(out), loose


def _conj(pieces: list[tuple[str, bool]]) -> tuple[str, frozenset[str]] | None:
    """AND of (condition, polarity) pieces, normalised piece by piece (cached per piece)."""
    parts: list[str] = []
    reads: frozenset[str] = frozenset()
    for text, polarity in pieces:
        got = _piece(text)
        if got is None:
            return None
        out, names, loose = got
        reads |= names
        if polarity:
            parts.append(f"({out})" if loose and len(pieces) > 1 else out)
        else:
            inner = _piece(f"not ({text})")
            if inner is None:
                return None
            parts.append(f"({inner[0]})" if inner[2] and len(pieces) > 1 else inner[0])
    return (" and ".join(parts) if parts else "True"), reads


def _derive_check(store: Store, version: str, row: dict[str, Any]) -> DerivedCheck | None:
    fns = store.functions_at(version, row["path"], row["start_line"])
    fn_start = fns[0]["start_line"] if fns else None

    def local(text: str) -> str:
        return with_locals(store, version, row["path"], fn_start, row["start_line"], text)

    pieces: list[tuple[str, bool]] = []
    reach = reach_condition(store, version, row["function"])
    if reach is not None:
        pieces.append((reach, True))
    guards = row["guards"]
    if row["kind"] == "assert" and row["condition"]:
        pieces += [(local(g["condition"]), bool(g["polarity"])) for g in guards]
        require = [(local(row["condition"]), True)]
    else:
        if not guards or not (row["exc_type"] or row["message"]):
            return None  # unguarded, or a bare re-raise inside an ``except``
        pieces += [(local(g["condition"]), bool(g["polarity"])) for g in guards[:-1]]
        require = [(local(guards[-1]["condition"]), not guards[-1]["polarity"])]
    when = _conj(pieces)
    req = _conj(require)
    if when is None or req is None or not any(not n.startswith("_") for n in when[1] | req[1]):
        return None  # reads no (public) argument attribute
    try:
        validate(when[0])
    except UnsafeExpression:
        return None  # too large for the evaluator as a whole
    start, end = row["start_line"], row["end_line"]
    span = f"{start}-{end}" if end != start else str(start)
    reads = when[1] | req[1]
    deps, writes = _write_deps(store, version, row, reads)
    return DerivedCheck(
        when[0],
        req[0],
        version,
        f"{version}:{row['path']}:{row['function']}:{span}",
        row["id"],
        row["kind"],
        row["function"],
        row["path"],
        start,
        end,
        bool(row["bare"]),
        row["message"],
        reads,
        tuple(sorted(deps | helper_reads(when[0], req[0]))),
        writes,
    )


def _write_deps(
    store: Store, version: str, row: dict[str, Any], reads: frozenset[str]
) -> tuple[set[str], bool]:
    """(attributes the earlier writes of ``reads`` depend on, any such write?).

    The same fold plan the checker folds in (:func:`~service.engine.evaluate.path_condition.
    fold_plan`: ``self.x = ...`` writes, resolution declarations, inlined helpers), so a
    card's memo key covers everything its verdict can read."""
    plan, names = fold_plan(store, version, row, frozenset(reads))
    deps = set(reads) | set(names)
    for w in (w for attr in reads for w in chain.earlier_writes(store, version, attr, row)):
        for text in [*(g["condition"] for g in w.guards), w.value or "None"]:
            try:
                deps |= referenced_names(text)
            except Exception:  # noqa: BLE001 - unparsable: only the attribute itself
                continue
    return deps, bool(plan) or any(
        chain.earlier_writes(store, version, attr, row) for attr in reads
    )


def qualifying_checks(store: Store, version: str) -> list[dict[str, Any]]:
    """The checks of ``version``'s validation surface (the candidates for derivation)."""
    return store.checks(
        version,
        where="path = ? OR path LIKE ?",
        params=["sglang/srt/server_args.py", "sglang/srt/arg_groups/%"],
    )


def derive_release(store: Store, version: str) -> list[DerivedCheck]:
    """Every qualifying check of ``version`` that yields a card, in source order."""
    out: list[DerivedCheck] = []
    for row in qualifying_checks(store, version):
        d = _derive_check(store, version, row)
        if d is not None:
            out.append(d)
    return out


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


def _fix_hints(require: str) -> dict[str, Any]:
    """Edits the ``require`` text itself names: ``args.X is None`` -> remove X, ``== c`` -> set."""
    try:
        node = ast.parse(require, mode="eval").body
    except SyntaxError:
        return {}
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
    return {k: v for k, v in hints.items() if v}


def version_range(present: list[str], all_releases: list[str]) -> str:
    """PEP 440 range over ``present``: ``>=lo,<=hi`` minus the ingested releases in between."""
    order = sorted(set(all_releases) | set(present), key=Version)
    have = sorted(set(present), key=Version)
    lo, hi = have[0], have[-1]
    inside = [r for r in order if Version(lo) <= Version(r) <= Version(hi)]
    spec = f">={lo},<={hi}"
    return spec + "".join(f",!={r}" for r in inside if r not in have)


def _card(group: list[DerivedCheck], all_releases: list[str]) -> Card:
    first = max(group, key=lambda d: Version(d.release))  # newest wording
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
        f"{', '.join(sorted({d.release for d in group}, key=Version))}. "
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
    releases = sorted((r["version"] for r in rows), key=Version)
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
            rec["card"]["releases"]  # noqa: B018 - a record without a range is a bad file
            rec["reads"], rec["sources"]  # noqa: B018
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
            hit = _memory.get(mkey)
        if hit is not None:
            return hit
        cached = _read_file(derived_path(store), key)
        if cached is not None:
            with _lock:
                _memory[mkey] = cached
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
        _memory[mkey] = result
    return result


def _records(store: Store) -> list[dict[str, Any]] | None:
    """The derived-card file's records for the KB as it is (cached in memory; None when
    the file is missing or stale: :func:`_derived` then derives)."""
    key, _ = derivation_key(store)
    mkey = (str(store.path), key, "records")
    with _lock:
        hit = _memory.get(mkey)
    if hit is None:
        hit = _read_raw(derived_path(store), key)
        if hit is None:
            return None
        with _lock:
            _memory[mkey] = hit
    return hit  # type: ignore[no-any-return]


def derive_cards_for(store: Store, release: str) -> list[Card]:
    """The derived cards whose range holds ``release``, validated from the file cache one
    release at a time (a pre-flight lint of one release validates only its cards); the
    same cards :func:`derive_cards` filtered by :meth:`Card.applies_to` gives."""
    key, _ = derivation_key(store)
    with _lock:
        full = _memory.get((str(store.path), key))
    records = None if full is not None else _records(store)
    if records is None:
        return [c for c in derive_cards(store) if c.applies_to(release)]
    mkey = (str(store.path), key, "for", release)
    with _lock:
        hit = _memory.get(mkey)
    if hit is None:
        try:
            hit = [_card_of(rec) for rec in records if release_in(rec["card"]["releases"], release)]
        except (ValueError, KeyError, TypeError):
            return [c for c in derive_cards(store, use_cache=False) if c.applies_to(release)]
        with _lock:
            _memory[mkey] = hit
    return hit  # type: ignore[no-any-return]


def derive_cards(store: Store, *, use_cache: bool = True) -> list[Card]:
    """Derived cards of every ingested release (memory, then file cache, then derivation)."""
    return _derived(store, use_cache)[0]


def derived_sources(store: Store) -> dict[str, dict[str, SourceInfo]]:
    """card id -> release -> :class:`SourceInfo` (the check it was derived from there);
    from the file cache without validating the cards when it is fresh."""
    key, _ = derivation_key(store)
    with _lock:
        full = _memory.get((str(store.path), key))
        hit = _memory.get((str(store.path), key, "sources"))
    if full is not None:
        return full[1]  # type: ignore[no-any-return]
    if hit is None:
        records = _records(store)
        if records is None:
            return _derived(store)[1]
        hit = _sources_of(records)
        with _lock:
            _memory[(str(store.path), key, "sources")] = hit
    return hit  # type: ignore[no-any-return]
