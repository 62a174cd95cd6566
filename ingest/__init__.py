"""Turns SGLang source into the KB: tree-sitter parsing, chunks, checks, references, call
sites, the flag catalog and embeddings. Imports :mod:`kb` only.

``pipeline``  :func:`~ingest.pipeline.ingest` one release (structure, then embeddings)
``analyze``   the rows of one file (a parse worker's job); ``ts`` the tree-sitter helpers
``chunker``   function-level chunks; ``checks`` asserts/raises with guards, references;
``calls``     call sites with guards; ``catalog*`` and ``static_*`` the flag catalog
"""

__all__ = [
    "analyze",
    "calls",
    "catalog",
    "checks",
    "chunker",
    "pipeline",
    "ts",
]
