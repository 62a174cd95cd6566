"""Getting SGLang's source for ingest, beyond one PyPI wheel (imports :mod:`kb` only).

``pypi_index``  which releases the package index offers (PEP 691 JSON, HTML fallback),
                oldest first, and which to skip (yanked, no wheel or sdist) and why
``git``         dev builds (``0.5.19.dev410+gedff717ef``): the exact commit from a bare
                mirror of ``TRIAGE_SGLANG_GIT``
``fetch``       :func:`~ingest.acquire.fetch.fetch_any`: any version string -> a source
``batch``       :func:`~ingest.acquire.batch.ingest_all`: ``ingest --all``
``release_list`` the index's release list kept for a TTL: what on-demand ingest may fetch
``quota``       the disk the KB and caches hold, and evicting on-demand releases

Acquisition does not shape the rows ingest writes, so these modules sit in a
sub-package outside the extraction code that
:func:`ingest.pipeline.code_fingerprint` hashes (it is named in
:data:`ingest.pipeline.NOT_EXTRACTION`): changing how releases are found
does not re-index every KB.
"""

from .fetch import fetch_any

__all__ = ["batch", "fetch", "fetch_any", "git", "pypi_index", "quota", "release_list"]
