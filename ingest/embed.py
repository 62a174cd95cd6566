"""Stage 2 of ingest: vectors for the chunks in scope (see :mod:`ingest.pipeline`).

Vectors are cached by the sha256 of the embedded text, so a chunk unchanged since
another release costs no encoding; Chroma receives stable ids
(``<release>:<chunk id>``) by upsert, from a writer thread that overlaps encoding, so
an interrupted run resumes without duplicates.

Scopes: ``none`` (structure only), ``default`` (the validation surface, see
:data:`VALIDATION_SURFACE`), ``full`` (the whole package).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ingest.chunker import Chunk
from ingest.report import IngestReport, Progress
from kb.knowledge import KnowledgeBase

__all__ = ["SCOPES", "VALIDATION_SURFACE", "embed_release", "in_scope"]

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


def in_scope(path: str, scope: str) -> bool:
    if scope == "full":
        return True
    if scope == "none":
        return False
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in VALIDATION_SURFACE)


def _scope_rank(scope: str) -> int:
    return SCOPES.index(scope) if scope in SCOPES else 0


def embed_release(
    kb: KnowledgeBase,
    version: str,
    scope: str,
    report: IngestReport,
    *,
    progress: Progress | None = None,
    chroma: bool = True,
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

    ``chroma=False`` only fills the vector cache (in the KB's SQLite, which several
    processes share) and leaves Chroma and the release's ``embedded_scope`` alone: the
    expensive encoding can then run in another process than the one that owns an
    embedded Chroma, which stores the vectors by calling this again (every vector cached,
    nothing encoded). ``serve --embed-defaults`` works so.
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

    stored = kb.vectors.release_hashes(version) if chroma else {}
    stale = [i for i in stored if i not in ids]
    waiting: dict[str, list[tuple[str, dict[str, Any]]]] = {}  # text hash -> chunks to upsert
    for r in rows if chroma else ():
        cid = f"{version}:{r['id']}"
        if stored.get(cid) != r["text_hash"]:
            waiting.setdefault(r["text_hash"], []).append((cid, r))
    writer = _VectorWriter(kb, version, model, waiting)
    try:
        if stale:
            writer.submit(writer.delete, stale)
        if chroma:
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
    if not chroma:
        return
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
