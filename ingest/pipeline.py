"""Ingest one release: parse, extract, index, embed.

Stages, each idempotent by content hash:

1. **structure** — every ``.py`` file of the package is parsed with
   tree-sitter (in a process pool for big trees); functions, chunks, checks,
   call sites, registrations (:mod:`ingest.registries`), references and the
   flag catalog are extracted and written to the structured index in one
   transaction, batch by batch as the workers deliver them (the main process
   extracts the flag catalog and writes while the workers parse). Files
   unchanged since another release indexed by the same code are not parsed at
   all: their rows are copied inside SQLite (see :func:`index_structure`). A
   release whose content hash (of every file's sha256 and the extraction code)
   is unchanged is skipped.
2. **embed** — the chunks in scope are embedded (:mod:`ingest.embed`). Vectors are
   cached by the sha256 of the embedded text, so a chunk unchanged since another release
   costs no encoding (content-defined chunk boundaries, see
   :mod:`ingest.chunker`, keep most chunks of an edited function unchanged);
   Chroma receives stable ids (``<release>:<chunk id>``) by upsert, from a
   writer thread that overlaps encoding, so an interrupted run resumes
   without duplicates.

Scopes: ``none`` (structure only), ``default`` (the validation surface, see
:data:`~ingest.embed.VALIDATION_SURFACE`), ``full`` (the whole package).

This module is ingest's entry point: it also re-exports what callers use of the
embedding stage (:func:`embed_release`, :func:`in_scope`, :data:`SCOPES`) and the
report (:class:`IngestReport`, :data:`Progress`).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from datetime import datetime, timezone
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path

import kb
from ingest.analyze import TABLES, BatchRows, analyze_batch, batches, keep_refs, stored_refs
from ingest.catalog import extract_catalog
from ingest.embed import SCOPES, VALIDATION_SURFACE, embed_release, in_scope
from ingest.report import IngestReport, Progress
from kb.catalog_types import Catalog
from kb.knowledge import KnowledgeBase
from kb.sources import ReleaseSource, iter_python_files
from kb.store import dumps

__all__ = [
    "KB_SHAPING",
    "SCOPES",
    "VALIDATION_SURFACE",
    "IngestReport",
    "Progress",
    "code_fingerprint",
    "embed_release",
    "in_scope",
    "index_structure",
    "ingest",
]


def _workers(n_files: int) -> int:
    """Processes for parsing: one per core (at most 4), only for big trees."""
    cores = os.cpu_count() or 1
    return min(cores, 4) if n_files >= 400 and cores > 1 else 1


def _mp_context():
    """``fork`` where available: workers only run tree-sitter, and need no re-import of __main__."""
    try:
        return get_context("fork")
    except ValueError:  # pragma: no cover - platforms without fork
        return get_context("spawn")


#: Sub-packages of ``ingest`` outside the extraction code (finding sources does not shape
#: the rows ingest writes, see :mod:`ingest.acquire`): left out of :func:`code_fingerprint`.
NOT_EXTRACTION: tuple[str, ...] = ("acquire", "atlas")

#: ``kb`` modules whose code shapes the rows ingest writes (hashed with the extraction code).
KB_SHAPING: tuple[str, ...] = (
    "catalog_types",
    "code_types",
    "embedder",
    "knowledge",
    "migrations",
    "schema",
    "sources",
    "store",
    "writer",
)


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 of the extraction code itself: every module of ``ingest`` but those of
    :data:`NOT_EXTRACTION` (``ingest/*.py`` and the ``catalog`` and ``static``
    sub-packages), and the KB modules that shape what it writes (:data:`KB_SHAPING`:
    the index schema and the record types).

    It is part of every release's content hash, so a KB built by older
    extraction code is re-indexed rather than trusted; vectors survive, since
    they are cached by the text they embed. Rows are only ever reused from a
    release indexed by the same code. A test checks that every ``kb`` module
    that ``ingest`` imports is listed in :data:`KB_SHAPING`.
    """
    here = Path(__file__).resolve().parent
    kb_dir = Path(kb.__file__).resolve().parent
    own = sorted(
        p for p in here.rglob("*.py") if p.relative_to(here).parts[0] not in NOT_EXTRACTION
    )
    names = [p.relative_to(here).as_posix() for p in own] + [f"{m}.py" for m in KB_SHAPING]
    files = own + [kb_dir / f"{m}.py" for m in KB_SHAPING]
    digest = hashlib.sha256()
    for name, f in zip(names, files, strict=True):
        digest.update(name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def _rel(source: ReleaseSource, file) -> str:
    return file.relative_to(source.root).as_posix()


def _parsed_batches(
    v: str, items: list[tuple[str, bytes]], workers: int, stack: ExitStack
) -> Iterator[BatchRows]:
    """Rows of ``items``, batch by batch, in order. With several workers the pool is
    started at once, so parsing runs while the caller does other work."""
    jobs = [(v, b) for b in batches(items)]
    if workers > 1 and len(jobs) > 1:
        pool = ProcessPoolExecutor(workers, mp_context=_mp_context())
        # on an error downstream, drop the batches not started yet rather than parse them
        stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        return pool.map(analyze_batch, jobs)
    return (analyze_batch(job) for job in jobs)


def _catalog_rows(v: str, catalog: Catalog) -> dict[str, list[tuple]]:
    rows: dict[str, list[tuple]] = {
        "declarations": [],
        "refs": [],
        "flags": [],
        "catalogs": [],
        "flag_spellings": [],
    }
    for d in catalog.declarations:
        rows["declarations"].append(
            (
                v,
                d.attr,
                d.cls,
                d.annotation,
                dumps(d.default),
                int(d.default_known),
                d.default_src,
                d.help,
                d.path,
                d.line,
            )
        )
        rows["refs"].append(
            (v, d.path, d.cls, d.attr, "declaration", d.line, d.cls, d.default_src, "[]")
        )
    for f in catalog.flags:
        rows["flags"].append(
            (
                v,
                f.attr,
                json.dumps(f.flags),
                f.type,
                f.action,
                f.nargs,
                dumps(f.default),
                int(f.default_known),
                f.default_src,
                dumps(f.choices) if f.choices is not None else None,
                f.choices_src,
                f.help,
                int(f.required),
                int(f.deprecated),
                f.path,
                f.line,
                f.layout,
            )
        )
    rows["catalogs"].append((v, json.dumps(dataclasses.asdict(catalog), default=repr)))
    seen: set[str] = set()
    for f in catalog.flags:
        for spelling in f.flags:
            if spelling not in seen:
                seen.add(spelling)
                rows["flag_spellings"].append((v, spelling, f.attr))
    return rows


def index_structure(
    kb: KnowledgeBase,
    source: ReleaseSource,
    *,
    force: bool = False,
    reuse: bool = True,
    progress: Progress | None = None,
) -> IngestReport:
    """Stage 1: the structured index of ``source`` (skipped when unchanged).

    Files whose analysis is already stored (same path and sha256, indexed by
    the same extraction code, by any release) are not parsed: the release
    links to them, and their stored unfiltered refs are filtered by this
    release's catalog, which yields exactly the rows a parse would
    (``reuse=False`` or ``force`` parses everything). The rest is parsed in a process pool
    while the main process extracts the flag catalog and then writes each
    batch as it arrives, all in one transaction.
    """
    t0 = time.perf_counter()
    files = iter_python_files(source)
    blobs = {_rel(source, f): f.read_bytes() for f in files}
    shas = {p: hashlib.sha256(b).hexdigest() for p, b in blobs.items()}
    code = code_fingerprint()
    content_hash = hashlib.sha256(
        "\n".join([code, *(f"{p} {s}" for p, s in sorted(shas.items()))]).encode()
    ).hexdigest()
    report = IngestReport(source.version, source.origin, "unchanged", files=len(files))
    existing = kb.store.release(source.version)
    if (
        not force
        and existing
        and existing["content_hash"] == content_hash
        and existing["status"] in ("indexed", "complete")
    ):
        for key in ("functions", "chunks", "checks", "refs", "flags"):
            setattr(report, key, existing[key])
        report.registrations = kb.store.query(
            "SELECT COUNT(*) FROM registrations WHERE release = ?", (source.version,)
        )[0][0]
        report.timings["structure_s"] = round(time.perf_counter() - t0, 3)
        return report

    v = source.version
    linked = kb.store.known_units(code, shas) if reuse and not force else {}
    items = sorted((p, b) for p, b in blobs.items() if p not in linked)
    report.parsed, report.reused_files = len(items), len(linked)
    done = 0
    with ExitStack() as stack:
        if gc.isenabled():  # bulk rows are acyclic: the collector would only scan them in vain
            gc.disable()
            stack.callback(gc.enable)
        parsed = _parsed_batches(v, items, _workers(len(items)), stack)
        catalog = extract_catalog(source.package_dir)  # while the workers parse
        known = frozenset({f.attr for f in catalog.flags} | {d.attr for d in catalog.declarations})
        with kb.store.release_writer(v, code=code) as writer:
            if linked:
                report.parse_errors.update(writer.link(linked))
                for path, refs in writer.file_refs(linked):
                    writer.add("refs", keep_refs(stored_refs(v, path, refs), known))
                done = len(linked)
                if progress:
                    progress("parse", done, len(files))
            for part in parsed:
                for table in TABLES:
                    writer.add(table, part.tables[table])
                writer.add("refs", keep_refs(part.refs, known))
                report.parse_errors.update(part.errors)
                done += part.files
                if progress:
                    progress("parse", done, len(files))
            for table, rows in _catalog_rows(v, catalog).items():
                writer.add(table, rows)
            report.structure = "indexed"
            report.functions = writer.counts["functions"]
            report.chunks = writer.counts["chunks"]
            report.checks = writer.counts["checks"]
            report.refs = writer.counts["refs"]
            report.registrations = writer.counts["registrations"]
            report.flags = len(catalog.flags)
            writer.finish(
                {
                    "version": v,
                    "origin": source.origin,
                    "content_hash": content_hash,
                    "status": "indexed",
                    "files": len(files),
                    "functions": report.functions,
                    "chunks": report.chunks,
                    "checks": report.checks,
                    "refs": report.refs,
                    "flags": report.flags,
                    "parse_errors": len(report.parse_errors),
                    "embedded_scope": "none",
                    "ingested_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "timings": "{}",
                }
            )
    report.timings["structure_s"] = round(time.perf_counter() - t0, 3)
    return report


def ingest(
    kb: KnowledgeBase,
    source: ReleaseSource,
    *,
    scope: str = "default",
    force: bool = False,
    progress: Progress | None = None,
    chroma: bool = True,
) -> IngestReport:
    """Both stages for one release; returns what was done and how long it took.
    ``chroma=False``: the embeddings go to the vector cache only (:func:`embed_release`)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    report = index_structure(kb, source, force=force, progress=progress)
    embed_release(kb, source.version, scope, report, progress=progress, chroma=chroma)
    kb.store.set_release_fields(source.version, timings=json.dumps(report.timings))
    return report
