"""Static catalog of an SGLang release's server CLI flags (SGLang is never imported).

Three layouts are understood, all read with tree-sitter so that a file Python's
``ast`` cannot parse still yields whatever parses:

* ``argparse`` — ``parser.add_argument("--x", "--alias", type=..., default=ServerArgs.x, ...)``
  calls on any receiver in ``sglang/srt/server_args.py`` and ``sglang/srt/arg_groups/**``
  (up to 0.5.13, and the manual leftovers of later releases);
* ``annotated_field`` — ``name: A[T, "help"] = default`` / ``A[T, Arg(...)]`` fields of
  ``ServerArgs`` (0.5.14–0.5.19) or of the namespace classes in
  ``sglang/srt/arg_groups/fields/*.py`` (0.5.20+), turned into flags with the rules of
  ``arg_groups/arg_utils.py::add_cli_args_from_dataclass``.

``ast`` is only used through ``ast.literal_eval`` on the text of literal nodes.

The diffusion server (``sglang serve`` with a diffusion model, ``sglang/multimodal_gen``)
has a parser of its own: its ``add_argument`` calls (:data:`DIFFUSION_FILES`) are read
the same way into ``Catalog.diffusion``, kept apart from the LLM server's flags so that
neither parser's answer proposes the other's flags. Flags whose names are built at run
time (the pipeline configs' ``--{prefix}...``) are not listed.

The modules of this package:

``extract``         :func:`extract_catalog`: which files are scanned, and how specs merge
``argparse_flags``  ``add_argument`` calls and the argparse action semantics all flags share
``field_flags``     annotated dataclass fields

The records are :mod:`kb.catalog_types`'s (re-exported here); static evaluation of the
source is :mod:`ingest.static`'s.
"""

from ingest.catalog.extract import (
    DIFFUSION_FILES,
    Catalog,
    Declaration,
    FlagSpec,
    extract_catalog,
)

__all__ = ["DIFFUSION_FILES", "Catalog", "Declaration", "FlagSpec", "extract_catalog"]
