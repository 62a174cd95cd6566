"""Baselines scored beside the engine, on the same metrics where they apply.

Both read the source of the incident's labelled release (``expected.release``; else
a release named in the log, else the newest ingested one), as if the installed
package were at hand; neither resolves releases (release@1 is not scored for them).

* :func:`grep_baseline` — the seed's manual method. Take the innermost SGLang
  frame's reported line, read ±``window`` lines of that file, and take the nearest
  ``assert``/``raise`` line as the location (the check starting there, when the KB
  has one). Root-cause flags: the command's flags whose attribute names appear in
  the window. Its "fix" is what the engineer tried: drop those flags (not verified,
  so ``fix_valid`` does not apply).
* :class:`RagBaseline` — naive retrieval. LangChain's ``RecursiveCharacterTextSplitter``
  (Python separators) chunks the release's validation files (``server_args.py`` and
  ``arg_groups/``); chunks are embedded with the KB's embedder (vectors cached in the
  KB's embedding cache) and ranked by cosine similarity to the exception line, its
  message and the innermost frame's text (numpy, in memory). Location: the first
  check inside the top chunk; root-cause flags: the command's flags whose attribute
  names appear in that chunk. No fixes.
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any

import numpy as np

from evals.incidents import Incident
from evals.scoring import Prediction
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.knowledge import KnowledgeBase
from kb.store import VALIDATION_PREFIXES, Store
from kb.versions import version_key
from service.engine import ParsedLog, parse_argv, parse_log

GREP_WINDOW = 10
RAG_CHUNK = 1200
RAG_OVERLAP = 150
_CHECK_LINE = re.compile(r"^\s*(assert\b|raise\b)")


def baseline_release(store: Store, incident: Incident, parsed: ParsedLog | None) -> str | None:
    """The release whose source a baseline reads (see the module docstring)."""
    ingested = {r["version"] for r in store.releases()}
    if incident.expected.release in ingested:
        return incident.expected.release
    for hint in parsed.release_hints if parsed else []:
        if hint.version in ingested:
            return hint.version
    return max(ingested, key=version_key) if ingested else None


def _parse(incident: Incident) -> ParsedLog | None:
    try:
        return parse_log(incident.crash_log)
    except Exception:
        return None


def _command_attrs(
    store: Store, release: str, incident: Incident, parsed: ParsedLog | None
) -> dict[str, str]:
    """attr -> the spelling the user typed, for the command's known flags."""
    argv = incident.command_argv()
    if not argv and parsed is not None:
        argv = list(parsed.command or [])
    parsed_args = parse_argv(argv, load_catalog(store, release))
    return {attr: pf.token for attr, pf in parsed_args.values.items()}


def _mentioned(text: str, attrs: dict[str, str]) -> list[str]:
    return sorted(
        spelling for attr, spelling in attrs.items() if re.search(rf"\b{re.escape(attr)}\b", text)
    )


def _check_at(store: Store, release: str, path: str, line: int) -> Check | None:
    rows = store.checks(
        release, path=path, where="start_line <= ? AND end_line >= ?", params=[line, line]
    )
    return rows[0] if rows else None


def _loc(check: Check | None, path: str, line: int) -> dict[str, Any]:
    if check is not None:
        return {
            "path": check.path,
            "function": check.function,
            "start_line": check.start_line,
            "end_line": check.end_line,
        }
    return {"path": path, "function": "", "start_line": line, "end_line": line}


def grep_baseline(store: Store, incident: Incident, window: int = GREP_WINDOW) -> Prediction:
    """The manual method: grep around the reported line."""
    t0 = time.perf_counter()
    parsed = _parse(incident)
    release = baseline_release(store, incident, parsed)
    exc = parsed.primary if parsed else None
    frame = None
    if exc is not None:
        frames = [
            f
            for f in exc.frames
            if f.package_path and f.package_path.startswith("sglang/") and f.line
        ]
        frame = frames[-1] if frames else None
    if release is None or frame is None or frame.package_path is None or frame.line is None:
        return Prediction(
            status="unlocated",
            root_cause=[],
            fixes=[],
            verified_fixes=False,
            resolves_release=False,
            latency_ms=(time.perf_counter() - t0) * 1000,
        )
    path, line = frame.package_path, frame.line
    lo = max(1, line - window)
    lines = store.file_lines(release, path, lo, line + window)
    if not lines:
        return Prediction(
            status="unlocated",
            root_cause=[],
            fixes=[],
            verified_fixes=False,
            resolves_release=False,
            latency_ms=(time.perf_counter() - t0) * 1000,
        )
    hits = [lo + i for i, text in enumerate(lines) if _CHECK_LINE.match(text)]
    location = None
    if hits:
        nearest = min(hits, key=lambda n: (abs(n - line), n))
        location = _loc(_check_at(store, release, path, nearest), path, nearest)
    attrs = _command_attrs(store, release, incident, parsed)
    flags = _mentioned("\n".join(lines), attrs)
    fixes = [{"set": {}, "remove": flags}] if flags else []
    return Prediction(
        status="located" if location else "unlocated",
        release=release,
        location=location,
        root_cause=flags,
        fixes=fixes,
        verified_fixes=False,
        resolves_release=False,
        latency_ms=(time.perf_counter() - t0) * 1000,
    )


class RagBaseline:
    """Naive RAG localization over one release's validation files."""

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        chunk_size: int = RAG_CHUNK,
        overlap: int = RAG_OVERLAP,
        top_k: int = 5,
    ) -> None:
        self.kb = kb
        self.store = kb.store
        self.chunk_size, self.overlap, self.top_k = chunk_size, overlap, top_k
        self._index: dict[str, tuple[list[dict[str, Any]], np.ndarray]] = {}

    def chunks(self, release: str) -> list[dict[str, Any]]:
        """Chunks of the validation files with their line spans."""
        from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter.from_language(
            Language.PYTHON,
            chunk_size=self.chunk_size,
            chunk_overlap=self.overlap,
            add_start_index=True,
        )
        out: list[dict[str, Any]] = []
        for path in sorted(self.store.paths(release)):
            if not path.startswith(VALIDATION_PREFIXES) or not path.endswith(".py"):
                continue
            text = self.store.file_text(release, path) or ""
            for doc in splitter.create_documents([text]):
                start = int(doc.metadata.get("start_index", 0))
                first = text.count("\n", 0, start) + 1
                last = first + doc.page_content.count("\n")
                out.append(
                    {"path": path, "start_line": first, "end_line": last, "text": doc.page_content}
                )
        return out

    def index(self, release: str) -> tuple[list[dict[str, Any]], np.ndarray]:
        if release not in self._index:
            chunks = self.chunks(release)
            emb = self.kb.embedder
            texts = [f"{c['path']}\n{c['text']}" for c in chunks]
            hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
            model = f"rag-baseline:{emb.key}"
            cached = self.store.cached_vectors(model, hashes)
            missing = [i for i, h in enumerate(hashes) if h not in cached]
            if missing:
                vecs = emb.encode([texts[i] for i in missing])
                self.store.put_vectors(
                    model, [(hashes[i], emb.dim, vecs[j].tobytes()) for j, i in enumerate(missing)]
                )
                for j, i in enumerate(missing):
                    cached[hashes[i]] = vecs[j].tobytes()
            matrix = (
                np.stack([np.frombuffer(cached[h], dtype=np.float32) for h in hashes])
                if hashes
                else np.zeros((0, emb.dim), dtype=np.float32)
            )
            self._index[release] = (chunks, matrix)
        return self._index[release]

    @staticmethod
    def query_text(parsed: ParsedLog | None, incident: Incident) -> str:
        exc = parsed.primary if parsed else None
        if exc is None:
            return incident.crash_log.strip().splitlines()[-1][:500]
        parts = [f"{exc.type}: {exc.message or ''}"]
        for f in reversed(exc.frames):
            if f.source:
                parts.append(f"{f.function or ''} {f.source}")
                break
        return "\n".join(parts)

    def predict(self, incident: Incident) -> Prediction:
        t0 = time.perf_counter()
        parsed = _parse(incident)
        release = baseline_release(self.store, incident, parsed)
        if release is None:
            return Prediction(status="unlocated", root_cause=[], resolves_release=False)
        chunks, matrix = self.index(release)
        if not chunks:
            return Prediction(
                status="unlocated", release=release, root_cause=[], resolves_release=False
            )
        qv = self.kb.query_embedder.encode([self.query_text(parsed, incident)])[0]
        sims = matrix @ qv
        order = np.argsort(-sims, kind="stable")[: self.top_k]
        top = chunks[int(order[0])]
        checks = self.store.checks(
            release,
            path=top["path"],
            where="start_line >= ? AND start_line <= ?",
            params=[top["start_line"], top["end_line"]],
        )
        location = _loc(checks[0], top["path"], top["start_line"]) if checks else None
        attrs = _command_attrs(self.store, release, incident, parsed)
        return Prediction(
            status="located" if location else "unlocated",
            release=release,
            location=location,
            root_cause=_mentioned(top["text"], attrs),
            resolves_release=False,
            latency_ms=(time.perf_counter() - t0) * 1000,
            extra={
                "top": [f"{chunks[int(i)]['path']}:{chunks[int(i)]['start_line']}" for i in order]
            },
        )


__all__ = ["GREP_WINDOW", "RagBaseline", "baseline_release", "grep_baseline"]
