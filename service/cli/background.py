"""What ``sglang-triage serve`` fills while it already answers (``make run``).

``make run`` indexes the default releases' structure only (``ingest --defaults --scope
none``, about half a minute) and serves at once. :class:`BackgroundFill`, a thread of the
serving process, then

1. computes the embeddings of every default release that has none, in a niced child
   process (``ingest --release X --vectors-only``): the encoding, minutes of CPU, runs
   beside the server and writes only the KB's vector cache, which processes share;
2. stores those vectors into Chroma from the serving process itself (the embedded Chroma is
   a single-process store that the server owns): every vector is cached, nothing is
   encoded, and the release's ``embedded_scope`` is set, so its search stops saying
   "no embeddings";
3. fills the atlas of every release from ``--atlas-since`` on (``atlas --since X``, niced).

Until a release's step 2 is done its answers say that search uses keywords only. The
children's output goes to ``<home>/background.log``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from kb.knowledge import KnowledgeBase
from service.ondemand import child_env
from service.settings import Settings

if TYPE_CHECKING:
    from ingest.report import IngestReport

__all__ = ["BackgroundFill", "releases_to_embed"]

log = logging.getLogger("sglang_triage.background")

#: Below the server's priority: the children take what CPU the answers leave.
NICE = 10


def releases_to_embed(kb: KnowledgeBase, releases: list[str]) -> list[str]:
    """The releases of ``releases`` indexed in ``kb`` without any embeddings, in order."""
    out = []
    for version in releases:
        rel = kb.store.release(version)
        if rel is None or rel["status"] not in ("indexed", "complete"):
            continue
        if (rel.get("embedded_scope") or "none") == "none":
            out.append(version)
    return out


class BackgroundFill(threading.Thread):
    """Embeddings of the default releases, then the atlas, behind a serving process."""

    def __init__(self, settings: Settings, *, embed: bool, atlas_since: str | None) -> None:
        super().__init__(name="background-fill", daemon=True)
        self.settings, self.embed, self.atlas_since = settings, embed, atlas_since
        self.log_path: Path = settings.home / "background.log"
        #: release -> what storing its vectors did (``embedded`` 0: the child encoded them all)
        self.embedded: dict[str, IngestReport] = {}
        self.failed: dict[str, str] = {}
        self._child: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        if importlib.util.find_spec("ingest") is None:
            log.warning("background fill skipped: the [ingest] extra is not installed")
            return
        if self.embed:
            self._embed_defaults()
        if self.atlas_since and not self._stopping.is_set():
            code = self._child_run(["atlas", "--since", self.atlas_since])
            log.info("atlas fill from %s ended with exit status %s", self.atlas_since, code)

    def stop(self) -> None:
        """Stop the running child (at server exit); nothing further starts."""
        self._stopping.set()
        child = self._child
        if child is not None and child.poll() is None:
            child.terminate()

    def _embed_defaults(self) -> None:
        from ingest.embed import embed_release
        from ingest.report import IngestReport

        kb = KnowledgeBase(self.settings)
        for version in releases_to_embed(kb, list(self.settings.releases)):
            if self._stopping.is_set():
                return
            origin = str((kb.store.release(version) or {}).get("origin") or "")
            where = (
                ["--path", origin.removeprefix("path:"), "--version", version]
                if origin.startswith("path:")
                else ["--release", version]
            )
            code = self._child_run(["ingest", *where, "--scope", "default", "--vectors-only"])
            if code != 0:
                self.failed[version] = f"the embedding child exited with status {code}"
                log.warning("embeddings of %s not computed (exit status %s)", version, code)
                continue
            report = IngestReport(version, origin, "unchanged")
            try:  # every vector is cached now: this only stores them into Chroma
                embed_release(kb, version, "default", report)
            except Exception as exc:  # Chroma or the cache: the server keeps keyword search
                self.failed[version] = f"{type(exc).__name__}: {exc}"
                log.warning("embeddings of %s not stored: %s", version, exc)
                continue
            self.embedded[version] = report
            log.info("embeddings of %s stored: its search is no longer keyword-only", version)

    def _child_run(self, args: list[str]) -> int:
        """``sglang-triage <args>`` as a niced child with its output in the log file."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            out.write(f"$ sglang-triage {' '.join(args)}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli.main", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=child_env(self.settings),  # the very KB and caches this server uses
            )
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, proc.pid, NICE)
        self._child = proc
        log.info("background: `sglang-triage %s` in process %s", " ".join(args), proc.pid)
        try:
            return proc.wait()
        finally:
            self._child = None
