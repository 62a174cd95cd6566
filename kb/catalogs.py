"""A release's flag catalog, read back from the KB (never by importing SGLang)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kb.catalog_types import Catalog, Declaration, FlagSpec
from kb.store import Store

T = TypeVar("T")


@dataclass(eq=False)
class IndexedCatalog(Catalog):
    """A :class:`Catalog` whose lookups are computed once.

    Catalogs read from the KB are shared (cached per release) and never
    modified, so ``by_flag``/``by_attr``/``declaration``/``specs_for`` answer
    from indexes built on first use; the dicts and lists handed out are copies,
    exactly as the plain catalog returns fresh ones. Other modules keep tables
    derived from the catalog here too, through :meth:`cached` (the defaults of
    ``base_attrs``, the flag parser's option table).
    """

    def cached(self, name: str, build: Callable[[], T]) -> T:
        """``build()`` once per catalog under ``name`` (a derived, read-only lookup).

        One ``name`` holds one kind of table: every caller of a name builds the same type.
        """
        hit: T | None = self.__dict__.get(name)
        if hit is None:
            hit = self.__dict__[name] = build()
        return hit

    def by_flag(self) -> dict[str, FlagSpec]:
        return dict(self.cached("_by_flag", lambda: Catalog.by_flag(self)))

    def diffusion_catalog(self) -> Catalog:
        """The diffusion server's flags as an indexed catalog of their own, built once."""
        return self.cached(
            "_diffusion", lambda: IndexedCatalog(flags=list(self.diffusion), declarations=[])
        )

    def by_attr(self) -> dict[str, FlagSpec]:
        return dict(self.cached("_by_attr", lambda: Catalog.by_attr(self)))

    def specs_for(self, attr: str) -> list[FlagSpec]:
        def build() -> dict[str, list[FlagSpec]]:
            out: dict[str, list[FlagSpec]] = {}
            for spec in self.flags:
                out.setdefault(spec.attr, []).append(spec)
            return out

        return list(self.cached("_specs", build).get(attr, ()))

    def declaration(self, attr: str) -> Declaration | None:
        def build() -> dict[str, Declaration]:
            out: dict[str, Declaration] = {}
            for decl in self.declarations:
                out.setdefault(decl.attr, decl)
            return out

        return self.cached("_decls", build).get(attr)


_lock = threading.Lock()
_cache: dict[tuple[str, str, str], Catalog] = {}


def load_catalog(store: Store, version: str) -> Catalog:
    """The :class:`Catalog` of ``version`` (an :class:`IndexedCatalog`, read-only); cached per
    KB file and content hash."""
    rel = store.require(version)
    key = (str(store.path), version, rel["content_hash"])
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    data = store.catalog_json(version)
    catalog = IndexedCatalog(
        flags=[FlagSpec(**f) for f in data["flags"]],
        declarations=[Declaration(**d) for d in data["declarations"]],
        diffusion=[FlagSpec(**f) for f in data.get("diffusion", [])],  # absent in older KBs
    )
    with _lock:
        _cache[key] = catalog
    return catalog
