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

This module holds :func:`extract_catalog` (which scans the files and merges the
specs) and re-exports the records; the work is done by ``catalog_records`` (the
records), ``catalog_argparse`` (``add_argument`` calls and action semantics),
``catalog_fields`` (annotated fields), ``static_values`` (the static evaluator)
and ``static_modules`` (parsed modules and import resolution).
"""

from __future__ import annotations

from pathlib import Path

from ingest.catalog_argparse import ArgparseReader
from ingest.catalog_fields import FieldReader
from ingest.static_modules import ModuleLoader
from ingest.static_values import StaticEvaluator, forget_local_scopes
from kb.catalog_types import Catalog, Declaration, FlagSpec, nargs_kind

__all__ = ["Catalog", "Declaration", "FlagSpec", "extract_catalog"]


def _scanned_files(package_dir: Path) -> list[Path]:
    """``srt/server_args.py`` and every file below ``srt/arg_groups/`` (links out of the
    package are not followed)."""
    srt = package_dir / "srt"
    files: list[Path] = []
    if (srt / "server_args.py").is_file():
        files.append(srt / "server_args.py")
    if (srt / "arg_groups").is_dir():
        files.extend(sorted((srt / "arg_groups").rglob("*.py")))
    root = package_dir.resolve()
    return [f for f in files if f.resolve().is_relative_to(root)]


#: Files (below ``sglang/``) declaring the diffusion server's flags: its ``ServerArgs``
#: (one file up to 0.5.13, a package later), disaggregation arguments, ``serve``'s own
#: ``--config``, and the quantization arguments ``ServerArgs.add_cli_args`` adds.
DIFFUSION_FILES = (
    "multimodal_gen/runtime/server_args.py",
    "multimodal_gen/runtime/server_args/",
    "multimodal_gen/runtime/disaggregation/",
    "multimodal_gen/runtime/entrypoints/cli/serve.py",
    "multimodal_gen/configs/quantization/",
)


def _diffusion_files(package_dir: Path) -> list[Path]:
    """The files of :data:`DIFFUSION_FILES` present in the release, sorted."""
    files: list[Path] = []
    for rel in DIFFUSION_FILES:
        p = package_dir / rel
        if rel.endswith("/") and p.is_dir():
            files.extend(sorted(p.rglob("*.py")))
        elif p.is_file():
            files.append(p)
    root = package_dir.resolve()
    return [f for f in files if f.resolve().is_relative_to(root)]


def _extract_diffusion(package_dir: Path) -> list[FlagSpec]:
    """The diffusion server's flags (empty for a release without ``multimodal_gen``)."""
    loader = ModuleLoader(package_dir)
    mods = [loader.load_path(p) for p in _diffusion_files(package_dir)]
    reader = ArgparseReader(mods, StaticEvaluator(loader, {}))
    reader.collect_action_classes()
    specs: list[FlagSpec] = []
    for mod in mods:
        specs.extend(reader.specs(mod, {}))
    return _merge(specs)


def _extract(package_dir: Path) -> Catalog:
    loader = ModuleLoader(package_dir)
    mods = [loader.load_path(p) for p in _scanned_files(package_dir)]
    evaluator = StaticEvaluator(loader, {})
    argparse = ArgparseReader(mods, evaluator)
    fields = FieldReader(mods, evaluator, argparse)

    declarations, decl_defaults = fields.declarations()
    evaluator.decl_defaults = decl_defaults
    argparse.collect_action_classes()

    specs = fields.specs()
    renames = argparse.from_cli_renames()
    for mod in mods:
        specs.extend(argparse.specs(mod, renames))
    return Catalog(
        flags=_merge(specs), declarations=declarations, diffusion=_extract_diffusion(package_dir)
    )


def _merge(specs: list[FlagSpec]) -> list[FlagSpec]:
    """Fold specs writing the same attr into one when they parse alike (same arity, deprecation)."""
    out: list[FlagSpec] = []
    seen_flags: set[str] = set()
    by_attr: dict[str, list[FlagSpec]] = {}
    for spec in specs:
        spec.flags = [f for f in spec.flags if f not in seen_flags]  # argparse would reject re-use
        if not spec.flags:
            continue
        seen_flags.update(spec.flags)
        target = None
        for cand in by_attr.get(spec.attr, []):
            if (
                nargs_kind(cand) == nargs_kind(spec)
                and cand.deprecated == spec.deprecated
                and (cand.action == spec.action or {cand.action, spec.action} <= {None, "store"})
            ):
                target = cand
                break
        if target is None:
            by_attr.setdefault(spec.attr, []).append(spec)
            out.append(spec)
            continue
        target.flags.extend(spec.flags)
        for name in ("type", "choices", "choices_src", "help", "default_src"):
            if getattr(target, name) in (None, "") and getattr(spec, name) not in (None, ""):
                setattr(target, name, getattr(spec, name))
        if not target.default_known and spec.default_known:
            target.default, target.default_known = spec.default, True
        target.required = target.required or spec.required
        for k, v in spec.extra.items():
            target.extra.setdefault(k, v)
    return out


def extract_catalog(package_dir: Path) -> Catalog:
    """Build the flag catalog of the release unpacked at ``package_dir`` (the ``sglang/`` folder)."""
    try:
        return _extract(Path(package_dir))
    finally:
        forget_local_scopes()
