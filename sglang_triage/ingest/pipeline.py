"""Ingest one release: parse, extract, index, embed.

Stages, each idempotent by content hash:

1. **structure** — every ``.py`` file of the package is parsed with
   tree-sitter; functions, chunks, checks, references and the flag catalog
   are extracted and written to the structured index in one transaction. A
   release whose content hash (of every file's sha256) is unchanged is
   skipped.
2. **embed** — the chunks in scope are embedded. Vectors are cached by the
   sha256 of the embedded text, so a function unchanged since another release
   costs no encoding; Chroma receives stable ids (``<release>:<chunk id>``) by
   upsert, so an interrupted run resumes without duplicates.

Scopes: ``none`` (structure only), ``default`` (the validation surface, see
:data:`VALIDATION_SURFACE`), ``full`` (the whole package).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from ..kb.base import KnowledgeBase
from ..kb.store import dumps, pack_text
from . import ts
from .acquire import ReleaseSource, iter_python_files
from .catalog import extract_catalog
from .checks import extract_checks, extract_refs
from .chunker import Chunk, chunk_file, enclosing_function

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

#: Files whose refs are worth indexing must mention one of these.
_REF_MARKERS = (b"server_args", b"ServerArgs", b"cfg.", b"args.")

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
    parse_errors: dict[str, list[int]] = field(default_factory=dict)
    embedded: int = 0  # chunks whose vectors were computed now
    reused: int = 0  # chunks whose vectors came from the cache
    upserted: int = 0
    scope: str = "none"
    timings: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_TABLES = ("files", "functions", "chunks", "chunks_fts", "checks", "refs", "flags",
           "flag_spellings", "declarations", "catalogs")


def _workers(n_files: int) -> int:
    """Processes for parsing: one per core beyond the first, only for big trees."""
    cores = os.cpu_count() or 1
    return min(cores, 4) if n_files >= 400 and cores > 1 else 1


def _mp_context():  # noqa: ANN202
    """``fork`` where available: workers only run tree-sitter, and need no re-import of __main__."""
    try:
        return get_context("fork")
    except ValueError:  # pragma: no cover - platforms without fork
        return get_context("spawn")


def analyze_file(v: str, path: str, blob: bytes, known_attrs: frozenset[str]
                 ) -> tuple[dict[str, list[tuple]], list[int]]:
    """Every structural row of one file (pure: safe to run in a worker process)."""
    rows: dict[str, list[tuple]] = {k: [] for k in _TABLES}
    tree = ts.parse(blob)
    errors = ts.error_lines(tree)
    text = blob.decode("utf-8", "replace")
    wants_refs = any(m in blob for m in _REF_MARKERS)
    found = ts.captures(ts.FILE_QUERY if wants_refs else ts.FILE_QUERY_LIGHT, tree.root_node)
    rows["files"].append((v, path, hashlib.sha256(blob).hexdigest(), text.count("\n") + 1,
                          json.dumps(errors[:50]), pack_text(text)))
    fc = chunk_file(path, tree.root_node, blob, found)
    for fn in fc.functions:
        rows["functions"].append((v, path, fn.qualname, fn.name, fn.class_name, fn.start_line,
                                  fn.end_line, fn.decorator_start, fn.signature,
                                  json.dumps(fn.decorators), fn.docstring, fn.parent))
    for ch in fc.chunks:
        rows["chunks"].append((ch.id, v, path, ch.qualname, ch.kind, ch.start_line,
                               ch.end_line, ch.part, ch.parts, ch.text_hash, ch.text))
        rows["chunks_fts"].append((v, ch.id, f"{path} {ch.qualname}\n{ch.text}"))
    for ck in extract_checks(tree.root_node, found):
        fn = enclosing_function(fc.functions, ck.start_line)
        rows["checks"].append((None, v, path, fn.qualname if fn else "<module>", ck.kind,
                               ck.exc_type, int(ck.bare), ck.condition, ck.message,
                               ck.start_line, ck.end_line, ck.test_start, ck.test_end,
                               json.dumps([g.as_dict() for g in ck.guards]), ck.source))
    if wants_refs:
        for ref in extract_refs(tree.root_node, found):
            if known_attrs and ref.attr not in known_attrs:
                continue
            fn = enclosing_function(fc.functions, ref.line)
            rows["refs"].append((v, path, fn.qualname if fn else "<module>", ref.attr,
                                 ref.kind, ref.line, ref.obj, ref.value,
                                 json.dumps([g.as_dict() for g in ref.guards])))
    return rows, errors


def _analyze_batch(job: tuple[str, list[tuple[str, bytes]], frozenset[str]]
                   ) -> tuple[dict[str, list[tuple]], dict[str, list[int]], int]:
    v, items, known = job
    out: dict[str, list[tuple]] = {k: [] for k in _TABLES}
    errors: dict[str, list[int]] = {}
    for path, blob in items:
        part, errs = analyze_file(v, path, blob, known)
        for k, r in part.items():
            out[k].extend(r)
        if errs:
            errors[path] = errs[:20]
    return out, errors, len(items)


def _merge_rows(rows: dict[str, list[tuple]], part: dict[str, list[tuple]],
                report: IngestReport, errors: dict[str, list[int]]) -> None:
    for k, r in part.items():
        rows[k].extend(r)
    report.parse_errors.update(errors)


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 of the extraction code itself (``ingest/*.py`` and the index schema).

    It is part of every release's content hash, so a KB built by older
    extraction code is re-indexed rather than trusted; vectors survive, since
    they are cached by the text they embed.
    """
    here = Path(__file__).resolve().parent
    files = sorted(here.glob("*.py")) + [here.parent / "kb" / "store.py"]
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


def index_structure(kb: KnowledgeBase, source: ReleaseSource, *, force: bool = False,
                    progress: Progress | None = None) -> IngestReport:
    """Stage 1: the structured index of ``source`` (skipped when unchanged)."""
    t0 = time.perf_counter()
    files = iter_python_files(source)
    blobs = {_rel(source, f): f.read_bytes() for f in files}
    shas = {p: hashlib.sha256(b).hexdigest() for p, b in blobs.items()}
    content_hash = hashlib.sha256(
        "\n".join([code_fingerprint(), *(f"{p} {s}" for p, s in sorted(shas.items()))]).encode()
    ).hexdigest()
    report = IngestReport(source.version, source.origin, "unchanged", files=len(files))
    existing = kb.store.release(source.version)
    if (not force and existing and existing["content_hash"] == content_hash
            and existing["status"] in ("indexed", "complete")):
        for key in ("functions", "chunks", "checks", "refs", "flags"):
            setattr(report, key, existing[key])
        report.timings["structure_s"] = round(time.perf_counter() - t0, 3)
        return report

    catalog = extract_catalog(source.package_dir)
    known_attrs = frozenset({f.attr for f in catalog.flags} | {d.attr for d in catalog.declarations})
    v = source.version
    rows: dict[str, list[tuple]] = {k: [] for k in _TABLES}
    items = sorted(blobs.items())
    jobs = [(v, items[i : i + 64], known_attrs) for i in range(0, len(items), 64)]
    workers = _workers(len(items))
    done = 0
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=_mp_context()) as pool:
            results = pool.map(_analyze_batch, jobs)
            for part, errors, n in results:
                _merge_rows(rows, part, report, errors)
                done += n
                if progress:
                    progress("parse", done, len(items))
    else:
        for job in jobs:
            part, errors, n = _analyze_batch(job)
            _merge_rows(rows, part, report, errors)
            done += n
            if progress:
                progress("parse", done, len(items))
    for d in catalog.declarations:
        rows["declarations"].append((v, d.attr, d.cls, d.annotation, dumps(d.default),
                                     int(d.default_known), d.default_src, d.help, d.path, d.line))
        rows["refs"].append((v, d.path, d.cls, d.attr, "declaration", d.line, d.cls,
                             d.default_src, "[]"))
    for f in catalog.flags:
        rows["flags"].append((v, f.attr, json.dumps(f.flags), f.type, f.action, f.nargs,
                              dumps(f.default), int(f.default_known), f.default_src,
                              dumps(f.choices) if f.choices is not None else None, f.choices_src,
                              f.help, int(f.required), int(f.deprecated), f.path, f.line, f.layout))
    rows["catalogs"].append((v, json.dumps(dataclasses.asdict(catalog), default=repr)))
    seen: set[str] = set()
    for f in catalog.flags:
        for spelling in f.flags:
            if spelling not in seen:
                seen.add(spelling)
                rows["flag_spellings"].append((v, spelling, f.attr))
    report.structure = "indexed"
    report.functions = len(rows["functions"])
    report.chunks = len(rows["chunks"])
    report.checks = len(rows["checks"])
    report.refs = len(rows["refs"])
    report.flags = len(catalog.flags)
    release_row = {
        "version": v, "origin": source.origin, "content_hash": content_hash, "status": "indexed",
        "files": len(files), "functions": report.functions, "chunks": report.chunks,
        "checks": report.checks, "refs": report.refs, "flags": report.flags,
        "parse_errors": len(report.parse_errors), "embedded_scope": "none",
        "ingested_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "timings": "{}",
    }
    kb.store.replace_release(v, release_row, rows)
    report.timings["structure_s"] = round(time.perf_counter() - t0, 3)
    return report


def _scope_rank(scope: str) -> int:
    return SCOPES.index(scope) if scope in SCOPES else 0


def embed_release(kb: KnowledgeBase, version: str, scope: str, report: IngestReport,
                  *, progress: Progress | None = None) -> None:
    """Stage 2: vectors for the chunks of ``version`` in ``scope``."""
    rel = kb.store.require(version)
    report.scope = scope
    if _scope_rank(scope) == 0:
        return
    t0 = time.perf_counter()
    rows = [dict(r) for r in kb.store.query(
        "SELECT id, path, qualname, kind, start_line, end_line, part, parts, text_hash, text "
        "FROM chunks WHERE release = ? ORDER BY path, start_line", (version,))]
    rows = [r for r in rows if in_scope(r["path"], scope)]
    embedder = kb.embedder
    model = embedder.key
    cached = kb.store.cached_vectors(model, [r["text_hash"] for r in rows])
    todo: dict[str, str] = {}
    for r in rows:
        if r["text_hash"] not in cached and r["text_hash"] not in todo:
            chunk = Chunk(r["path"], r["qualname"], r["kind"], r["start_line"], r["end_line"],
                          r["text"], r["part"], r["parts"])
            todo[r["text_hash"]] = chunk.embed_text
    report.reused = len(rows) - sum(1 for r in rows if r["text_hash"] in todo)
    hashes = list(todo)
    step = embedder.batch_size * 4  # commit vectors every few batches
    for i in range(0, len(hashes), step):
        part = hashes[i : i + step]
        if progress:
            progress("embed", i, len(hashes))
        vecs = embedder.encode([todo[h] for h in part])
        kb.store.put_vectors(model, [(h, vecs.shape[1], vecs[j].tobytes())
                                     for j, h in enumerate(part)])
        report.embedded += len(part)
    if progress:
        progress("embed", len(hashes), len(hashes))
    report.timings["embed_s"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    all_vecs = kb.store.cached_vectors(model, [r["text_hash"] for r in rows])
    ids = [f"{version}:{r['id']}" for r in rows]
    present = kb.vectors.existing(ids)
    pending = [(i, r) for i, r in zip(ids, rows, strict=True) if i not in present]
    if pending:
        kb.vectors.upsert(
            [i for i, _ in pending],
            [np.frombuffer(all_vecs[r["text_hash"]], dtype=np.float32) for _, r in pending],
            [{"release": version, "path": r["path"], "qualname": r["qualname"],
              "start_line": r["start_line"], "end_line": r["end_line"], "kind": r["kind"]}
             for _, r in pending],
        )
    report.upserted = len(pending)
    report.timings["upsert_s"] = round(time.perf_counter() - t1, 3)
    best = scope if _scope_rank(scope) >= _scope_rank(rel["embedded_scope"] or "none") \
        else rel["embedded_scope"]
    kb.store.set_release_fields(version, status="complete", embedded_scope=best)


def ingest(kb: KnowledgeBase, source: ReleaseSource, *, scope: str = "default",
           force: bool = False, progress: Progress | None = None) -> IngestReport:
    """Both stages for one release; returns what was done and how long it took."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    report = index_structure(kb, source, force=force, progress=progress)
    embed_release(kb, source.version, scope, report, progress=progress)
    kb.store.set_release_fields(source.version, timings=json.dumps(report.timings))
    return report
