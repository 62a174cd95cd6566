"""Turns SGLang source into the KB: tree-sitter parsing, chunks, checks, references, call
sites, the flag catalog and embeddings. Imports :mod:`kb` only.

``pipeline``  :func:`~ingest.pipeline.ingest` one release (structure, then embeddings)
``embed``     the embedding stage and its scopes; ``report`` what an ingest did
``analyze``   the rows of one file (a parse worker's job); ``ts`` the tree-sitter helpers
``chunker``   function-level chunks; ``checks`` asserts/raises with guards;
``refs``      argument-attribute references; ``calls`` call sites with guards;
``registries`` registrations; ``prebuilt`` exceptions built before their ``raise``
``catalog/``  the flag catalog, read with ``static/`` (static reading of the source)
``acquire/``  finding sources (PyPI, git, batches, quota): not extraction code
"""

__all__ = [
    "acquire",
    "analyze",
    "calls",
    "catalog",
    "checks",
    "chunker",
    "embed",
    "pipeline",
    "prebuilt",
    "refs",
    "registries",
    "report",
    "static",
    "ts",
]
