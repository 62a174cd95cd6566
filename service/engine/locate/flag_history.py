"""When each flag existed: the releases of the KB that know a spelling, and renames between them.

:func:`flag_history` lists the ingested releases that have a flag spelling and
those that do not, and names every transition between consecutive ingested
releases as a :class:`FlagChange`: *added* in X, *removed* in X (with the
spelling its attribute has in X when it has one: a rename, "use `--z`"), or
*deprecated* in X. Each change cites the flag's declaration
(``release:path:line``): in X for an addition, a rename or a deprecation, in
the last release that had it for a removal.

``scope`` picks the parser: ``llm`` (the LLM server's flags, the default) or
``diffusion`` (the diffusion server's own parser, ``Catalog.diffusion``); a flag
is only ever looked up among the flags of that parser. A flag that exists in no
release of its scope but in the other one says so (``other_scope``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kb.catalog_types import Catalog, FlagSpec
from kb.catalogs import load_catalog
from kb.store import Store
from kb.versions import version_key

__all__ = [
    "FlagChange",
    "FlagHistory",
    "Scope",
    "flag_history",
    "releases_with_flags",
    "scoped_catalog",
]

Scope = Literal["llm", "diffusion"]
SCOPE_NAMES: dict[str, str] = {
    "llm": "SGLang's LLM server",
    "diffusion": "SGLang's diffusion server (sglang/multimodal_gen)",
}


class FlagChange(BaseModel):
    """One transition of a flag spelling between consecutive ingested releases."""

    release: str  # the first release with the new state
    kind: Literal["added", "removed", "renamed", "deprecated"]
    spelling: str | None = None  # renamed: the attribute's spelling in ``release``
    citation: str | None = None  # release:path:line of the declaration (see the module doc)
    text: str


class FlagHistory(BaseModel):
    """Where a flag spelling exists among the ingested releases."""

    flag: str
    present_in: list[str]
    absent_in: list[str]
    note: str | None
    renamed_to: str | None = None  # its attribute's spelling in the diagnosed release
    changes: list[FlagChange] = Field(default_factory=list)
    scope: Scope = "llm"
    #: releases whose *other* parser has the flag (``--num-gpus`` given to the LLM server)
    other_scope: list[str] = Field(default_factory=list)


def releases_with_flags(store: Store) -> list[str]:
    """Indexed releases of the KB whose flag spellings are stored, oldest first."""
    rows = store.query(
        "SELECT version FROM releases WHERE status IN ('indexed', 'complete') "
        "AND version IN (SELECT DISTINCT release FROM flag_spellings)"
    )
    # release rows are PEP 440 versions (PyPI releases and dev builds), in release order
    return sorted((r["version"] for r in rows), key=version_key)


def scoped_catalog(catalog: Catalog, scope: Scope) -> Catalog:
    """``catalog`` itself for the LLM server, its diffusion flags as a catalog for ``diffusion``."""
    return catalog if scope == "llm" else catalog.diffusion_catalog()


def _catalog(store: Store, release: str, scope: Scope) -> Catalog | None:
    try:
        return scoped_catalog(load_catalog(store, release), scope)
    except Exception:  # no catalog: nothing known for that release
        return None


def _spelling_attrs(store: Store, flag: str, releases: list[str], scope: Scope) -> dict[str, str]:
    """release -> the attribute ``flag`` writes there, for the releases whose ``scope`` parser has it."""
    if scope == "llm":
        rows = store.query("SELECT release, attr FROM flag_spellings WHERE spelling = ?", (flag,))
        return {r["release"]: r["attr"] for r in rows}
    out: dict[str, str] = {}
    for v in releases:
        cat = _catalog(store, v, scope)
        spec = cat.by_flag().get(flag) if cat is not None else None
        if spec is not None:
            out[v] = spec.attr
    return out


def flag_history(store: Store, flag: str, release: str, scope: Scope = "llm") -> FlagHistory:
    """Presence of ``flag`` in each ingested release, relative to ``release``.

    The note names the transitions between consecutive releases ("added after
    0.5.11", "removed after 0.5.11"); when the flag is missing from ``release``
    but its attribute exists there under another spelling, ``renamed_to`` is that
    spelling. Only the flags of the ``scope`` parser count (see the module doc).
    """
    flag = flag.split("=", 1)[0]
    releases = releases_with_flags(store)
    attrs = _spelling_attrs(store, flag, releases, scope)
    present = [v for v in releases if v in attrs]
    absent = [v for v in releases if v not in attrs]
    renamed: str | None = None
    if release not in attrs and attrs:
        renamed = _renamed_spelling(store, release, set(attrs.values()), scope)
    other: list[str] = []
    if not present:
        other_scope: Scope = "diffusion" if scope == "llm" else "llm"
        other = sorted(_spelling_attrs(store, flag, releases, other_scope), key=version_key)
        where = "" if scope == "llm" else f" of {SCOPE_NAMES[scope]}"
        missing = f"{flag} is not a flag{where} in any ingested release ({', '.join(releases)})"
        if other:
            missing += f"; it is a flag of {SCOPE_NAMES[other_scope]} in {', '.join(other)}"
        note: str | None = missing
    elif not absent:
        note = None
    else:
        steps = []
        for a, b in zip(releases, releases[1:], strict=False):
            if (a in attrs) != (b in attrs):
                steps.append(f"{'removed' if a in attrs else 'added'} after {a}")
        note = (
            f"{flag} exists in {', '.join(present)} but not in {', '.join(absent)}"
            f" ({'; '.join(steps)})"
        )
    if renamed is not None:
        attr = next(iter(sorted(set(attrs.values()))))
        note = (note + "; " if note else "") + (
            f"its attribute `{attr}` is spelled {renamed} in {release}"
        )
    changes = _changes(store, flag, releases, attrs, scope) if present else []
    told = [c.text for c in changes if c.kind != "added" or release not in attrs]
    if told:
        note = (note + "; " if note else "") + "; ".join(told)
    return FlagHistory(
        flag=flag,
        present_in=present,
        absent_in=absent,
        note=note,
        renamed_to=renamed,
        changes=changes,
        scope=scope,
        other_scope=other,
    )


def _spec(
    store: Store,
    release: str,
    flag: str | None = None,
    attr: str | None = None,
    scope: Scope = "llm",
) -> FlagSpec | None:
    catalog = _catalog(store, release, scope)
    if catalog is None:
        return None  # no catalog: no declaration to cite
    return catalog.by_flag().get(flag) if flag else catalog.by_attr().get(attr or "")


def _cite(release: str, spec: FlagSpec | None) -> str | None:
    return f"{release}:{spec.path}:{spec.line}" if spec is not None and spec.line else None


def _changes(
    store: Store, flag: str, releases: list[str], attrs: dict[str, str], scope: Scope = "llm"
) -> list[FlagChange]:
    """Transitions of ``flag`` between consecutive ingested releases (see the module doc)."""
    out: list[FlagChange] = []
    deprecated_before = False
    for a, b in zip(releases, releases[1:], strict=False):
        if a in attrs and b not in attrs:
            spec = _spec(store, b, attr=attrs[a], scope=scope)
            new = spec.flags[0] if spec is not None and spec.flags else None
            if new is not None:
                out.append(
                    FlagChange(
                        release=b,
                        kind="renamed",
                        spelling=new,
                        citation=_cite(b, spec),
                        text=f"`{flag}` was removed in {b}; use `{new}`"
                        f" (its attribute `{attrs[a]}`)",
                    )
                )
            else:
                out.append(
                    FlagChange(
                        release=b,
                        kind="removed",
                        citation=_cite(a, _spec(store, a, flag=flag, scope=scope)),
                        text=f"`{flag}` was removed in {b} (last in {a})",
                    )
                )
        elif b in attrs and a not in attrs:
            spec = _spec(store, b, flag=flag, scope=scope)
            out.append(
                FlagChange(
                    release=b,
                    kind="added",
                    citation=_cite(b, spec),
                    text=f"`{flag}` was added in {b}",
                )
            )
        if b in attrs:
            spec = _spec(store, b, flag=flag, scope=scope)
            dep = bool(spec is not None and spec.deprecated)
            if dep and not deprecated_before and a in attrs:
                out.append(
                    FlagChange(
                        release=b,
                        kind="deprecated",
                        citation=_cite(b, spec),
                        text=f"`{flag}` is deprecated from {b}",
                    )
                )
            deprecated_before = dep
    return out


def _renamed_spelling(
    store: Store, release: str, attrs: set[str], scope: Scope = "llm"
) -> str | None:
    catalog = _catalog(store, release, scope)
    if catalog is None:
        return None  # no catalog: no rename information
    for attr in sorted(attrs):
        spec = catalog.by_attr().get(attr)
        if spec is not None and spec.flags:
            return spec.flags[0]
    return None
