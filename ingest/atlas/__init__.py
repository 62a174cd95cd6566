"""The atlas: a light index of every release (line hashes, functions, raise messages),
built from wheels without tree-sitter (:mod:`kb.atlas` holds and reads it).

It does not shape the rows of the structured index, so it sits outside the extraction
code that :func:`ingest.pipeline.code_fingerprint` hashes (named in
:data:`ingest.pipeline.NOT_EXTRACTION`).
"""

from .build import AtlasFill, atlas_release, file_facts, fill_atlas

__all__ = ["AtlasFill", "atlas_release", "file_facts", "fill_atlas"]
