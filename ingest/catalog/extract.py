"""The catalog's entry point: which files are scanned, and how their specs are merged.

:func:`extract_catalog` reads ``sglang/srt/server_args.py`` and every file below
``sglang/srt/arg_groups/`` (and, apart, the diffusion server's :data:`DIFFUSION_FILES`)
with the readers of :mod:`ingest.catalog.argparse_flags` and
:mod:`ingest.catalog.field_flags`, then folds the specs writing the same attribute into
one :class:`FlagSpec` when they parse alike. The records are :mod:`kb.catalog_types`'s.
"""

from __future__ import annotations

from pathlib import Path

from ingest.catalog.argparse_flags import ArgparseReader
from ingest.catalog.field_flags import FieldReader
from ingest.static.modules import ModuleLoader
from ingest.static.values import StaticEvaluator, forget_local_scopes
from kb.catalog_types import Catalog, Declaration, FlagSpec, nargs_kind

__all__ = ["DIFFUSION_FILES", "Catalog", "Declaration", "FlagSpec", "extract_catalog"]


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
