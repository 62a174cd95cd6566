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
    return Catalog(flags=_merge(specs), declarations=declarations)


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
