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
2. **embed** — the chunks in scope are embedded. Vectors are cached by the
   sha256 of the embedded text, so a chunk unchanged since another release
   costs no encoding (content-defined chunk boundaries, see
   :mod:`ingest.chunker`, keep most chunks of an edited function unchanged);
   Chroma receives stable ids (``<release>:<chunk id>``) by upsert, from a
   writer thread that overlaps encoding, so an interrupted run resumes
   without duplicates.

Scopes: ``none`` (structure only), ``default`` (the validation surface, see
:data:`VALIDATION_SURFACE`), ``full`` (the whole package).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

import kb
from ingest.analyze import TABLES, BatchRows, analyze_batch, batches, keep_refs, stored_refs
from ingest.catalog import extract_catalog
from ingest.chunker import Chunk
from kb.catalog_types import Catalog
from kb.knowledge import KnowledgeBase
from kb.sources import ReleaseSource, iter_python_files
from kb.store import dumps

#: Path prefixes (package-relative) embedded by the default scope: where launch
#: arguments are declared, resolved and validated.
VALIDATION_SURFACE: tuple[str, ...] = (
    "sglang/srt/server_args.py",
    "sglang/srt/server_args_config_parser.py",
    "sglang/srt/arg_groups/",
    "sglang/srt/configs/model_config.py",
    "sglang/srt/configs/load_config.py",
    "sglang/srt/configs/device_config.py",
    "sglang/srt/speculative/spec_info.py",
    "sglang/launch_server.py",
)

SCOPES = ("none", "default", "full")

Progress = Callable[[str, int, int], None]


@dataclass
class IngestReport:
    version: str
    origin: str
    structure: str  # "indexed" | "unchanged"
    files: int = 0
    functions: int = 0
    chunks: int = 0
    checks: int = 0
    refs: int = 0
    flags: int = 0
    registrations: int = 0
    parse_errors: dict[str, list[int]] = field(default_factory=dict)
    parsed: int = 0  # files parsed now
    reused_files: int = 0  # files whose stored analysis (same path, bytes and code) was linked
    embedded: int = 0  # chunks whose vectors were computed now
    reused: int = 0  # chunks whose vectors came from the cache
    upserted: int = 0
    scope: str = "none"
    timings: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _workers(n_files: int) -> int:
    """Processes for parsing: one per core (at most 4), only for big trees."""
    cores = os.cpu_count() or 1
    return min(cores, 4) if n_files >= 400 and cores > 1 else 1


def _mp_context():  # noqa: ANN202
    """``fork`` where available: workers only run tree-sitter, and need no re-import of __main__."""
    try:
        return get_context("fork")
    except ValueError:  # pragma: no cover - platforms without fork
        return get_context("spawn")


#: ``kb`` modules whose code shapes the rows ingest writes (hashed with ``ingest/*.py``).
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
    """sha256 of the extraction code itself: ``ingest/*.py`` and the KB modules that
    shape what it writes (:data:`KB_SHAPING`: the index schema and the record types).

    It is part of every release's content hash, so a KB built by older
    extraction code is re-indexed rather than trusted; vectors survive, since
    they are cached by the text they embed. Rows are only ever reused from a
    release indexed by the same code. A test checks that every ``kb`` module
    that ``ingest`` imports is listed in :data:`KB_SHAPING`.
    """
    here = Path(__file__).resolve().parent
    kb_dir = Path(kb.__file__).resolve().parent
    files = sorted(here.glob("*.py")) + [kb_dir / f"{m}.py" for m in KB_SHAPING]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def in_scope(path: str, scope: str) -> bool:
    if scope == "full":
        return True
    if scope == "none":
        return False
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in VALIDATION_SURFACE)


def _rel(source: ReleaseSource, file) -> str:  # noqa: ANN001
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


def _scope_rank(scope: str) -> int:
    return SCOPES.index(scope) if scope in SCOPES else 0


def embed_release(
    kb: KnowledgeBase,
    version: str,
    scope: str,
    report: IngestReport,
    *,
    progress: Progress | None = None,
) -> None:
    """Stage 2: vectors for the chunks of ``version`` in ``scope``.

    Texts without a cached vector are encoded longest first, one model batch
    per call (the order ``SentenceTransformer.encode`` itself uses, so
    padding is minimal), while a writer thread commits each batch's vectors to
    the cache and upserts the chunks waiting for them into Chroma: storage
    overlaps encoding, and an interrupted run keeps every committed batch.
    Chroma is reconciled with the release's chunk rows: ids that no longer
    exist are deleted, and a chunk whose stored text hash differs (or is
    missing) is upserted again.
    """
    rel = kb.store.require(version)
    report.scope = scope
    if _scope_rank(scope) == 0:
        return
    t0 = time.perf_counter()
    ids = {
        f"{version}:{r['id']}": r["path"]
        for r in kb.store.query("SELECT id, path FROM chunks WHERE release = ?", (version,))
    }
    paths = sorted(p for p in set(ids.values()) if in_scope(p, scope))  # per file, not per chunk
    rows = [
        dict(r)
        for i in range(0, len(paths), 500)
        for r in kb.store.query(
            "SELECT id, path, qualname, kind, start_line, end_line, part, parts, text_hash, text "
            f"FROM chunks WHERE release = ? AND path IN ({', '.join('?' * len(paths[i : i + 500]))})",
            (version, *paths[i : i + 500]),
        )
    ]
    rows.sort(key=lambda r: (r["path"], r["start_line"]))
    embedder = kb.embedder
    model = embedder.key
    cached = kb.store.cached_vectors(model, [r["text_hash"] for r in rows])
    todo: dict[str, str] = {}
    for r in rows:
        if r["text_hash"] not in cached and r["text_hash"] not in todo:
            chunk = Chunk(
                r["path"],
                r["qualname"],
                r["kind"],
                r["start_line"],
                r["end_line"],
                r["text"],
                r["part"],
                r["parts"],
            )
            todo[r["text_hash"]] = chunk.embed_text
    report.reused = len(rows) - sum(1 for r in rows if r["text_hash"] in todo)

    stored = kb.vectors.release_hashes(version)
    stale = [i for i in stored if i not in ids]
    waiting: dict[str, list[tuple[str, dict[str, Any]]]] = {}  # text hash -> chunks to upsert
    for r in rows:
        cid = f"{version}:{r['id']}"
        if stored.get(cid) != r["text_hash"]:
            waiting.setdefault(r["text_hash"], []).append((cid, r))
    writer = _VectorWriter(kb, version, model, waiting)
    try:
        if stale:
            writer.submit(writer.delete, stale)
        writer.submit(writer.upsert, cached)
        order = sorted(todo, key=lambda h: -len(todo[h]))  # stable: equal lengths keep order
        step = embedder.batch_size
        for i in range(0, len(order), step):
            if progress:
                progress("embed", i, len(order))
            part = order[i : i + step]
            vecs = embedder.encode([todo[h] for h in part])
            writer.submit(writer.store, part, vecs)
            report.embedded += len(part)
        if progress:
            progress("embed", len(order), len(order))
    finally:
        writer.close()
    writer.raise_errors()
    report.upserted = writer.upserted
    report.timings["embed_s"] = round(time.perf_counter() - t0, 3)
    report.timings["upsert_s"] = round(writer.upsert_s, 3)
    best = (
        scope
        if _scope_rank(scope) >= _scope_rank(rel["embedded_scope"] or "none")
        else rel["embedded_scope"]
    )
    kb.store.set_release_fields(version, status="complete", embedded_scope=best)


class _VectorWriter:
    """A single background thread that writes what :func:`embed_release` encodes.

    Each encoded batch is committed to the vector cache at once (so an
    interruption loses at most the batch being encoded); the chunks waiting
    for those vectors are upserted into Chroma in groups of
    :attr:`UPSERT_EVERY` (fewer, larger calls cost Chroma less CPU, which on
    a small machine is CPU the encoder does not get). Tasks run in submission
    order; after the first failure the rest are skipped and
    :meth:`raise_errors` re-raises it in the caller's thread.
    """

    UPSERT_EVERY = 256

    def __init__(
        self,
        kb: KnowledgeBase,
        version: str,
        model: str,
        waiting: dict[str, list[tuple[str, dict[str, Any]]]],
    ) -> None:
        self.kb, self.version, self.model, self.waiting = kb, version, model, waiting
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="vector-writer")
        self.error: BaseException | None = None
        self.upserted = 0
        self.upsert_s = 0.0
        self._pending: tuple[list[str], list[np.ndarray], list[dict[str, Any]]] = ([], [], [])

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            if self.error is not None:
                return
            try:
                fn(*args)
            except BaseException as exc:  # re-raised in the caller's thread
                self.error = exc

        self.pool.submit(run)

    def close(self) -> None:
        """Upsert what is still pending and wait for every submitted task."""
        self.submit(self.flush)
        self.pool.shutdown(wait=True)

    def raise_errors(self) -> None:
        if self.error is not None:
            raise self.error

    def delete(self, ids: list[str]) -> None:
        self.kb.vectors.delete_ids(ids)

    def store(self, hashes: list[str], vecs: np.ndarray) -> None:
        """Commit one encoded batch to the cache; queue the chunks that wait for it."""
        self.kb.store.put_vectors(
            self.model, [(h, vecs.shape[1], vecs[j].tobytes()) for j, h in enumerate(hashes)]
        )
        self.upsert({h: vecs[j] for j, h in enumerate(hashes)})

    def upsert(self, vectors: dict[str, Any]) -> None:
        """Queue every waiting chunk whose text hash is in ``vectors`` (bytes or arrays)."""
        ids, vecs, metas = self._pending
        for h, vec in vectors.items():
            for cid, r in self.waiting.pop(h, ()):
                ids.append(cid)
                vecs.append(np.frombuffer(vec, dtype=np.float32) if isinstance(vec, bytes) else vec)
                metas.append(
                    {
                        "release": self.version,
                        "path": r["path"],
                        "qualname": r["qualname"],
                        "start_line": r["start_line"],
                        "end_line": r["end_line"],
                        "kind": r["kind"],
                        "text_hash": r["text_hash"],
                    }
                )
        if len(ids) >= self.UPSERT_EVERY:
            self.flush()

    def flush(self) -> None:
        ids, vecs, metas = self._pending
        if not ids:
            return
        t = time.perf_counter()
        self.kb.vectors.upsert(ids, vecs, metas)
        self.upserted += len(ids)
        self._pending = ([], [], [])
        self.upsert_s += time.perf_counter() - t


def ingest(
    kb: KnowledgeBase,
    source: ReleaseSource,
    *,
    scope: str = "default",
    force: bool = False,
    progress: Progress | None = None,
) -> IngestReport:
    """Both stages for one release; returns what was done and how long it took."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    report = index_structure(kb, source, force=force, progress=progress)
    embed_release(kb, source.version, scope, report, progress=progress)
    kb.store.set_release_fields(source.version, timings=json.dumps(report.timings))
    return report
