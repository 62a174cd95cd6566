"""Building the atlas (:mod:`kb.atlas`): the light index of every release, from wheels.

:func:`atlas_release` reads one release's ``sglang/**.py`` straight from its wheel (or an
unpacked package folder): every file's line hashes, and for files whose content the atlas
does not hold yet, the functions and raises found with Python's own ``ast`` (no
tree-sitter, no unpacking, no embeddings: a few seconds for a release that shares most
files with one already there). :func:`fill_atlas` does that for every release the package
index lists from a version on, downloading each wheel with ``pip download --no-deps``
and, unless it was cached before or is a default release, deleting it again.

What is kept of a raise: its lines, the exception type (the called name's last part;
``AssertionError`` for ``assert``), and the message's source (the first argument, or the
assert's message). An exception built into a variable (``err = ValueError(...)``) is
kept at the line that builds it: that is where its text is.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import logging
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ingest.prebuilt import exception_like
from kb.atlas import Atlas, AtlasFunction, AtlasRaise, FileFacts, line_hash
from kb.settings import KBSettings
from kb.sources import download_wheel, find_wheel

__all__ = ["AtlasFill", "atlas_release", "file_facts", "fill_atlas"]

log = logging.getLogger(__name__)

#: Package folders left out: SGLang's own test suites and benchmarks never raise at launch.
_SKIP_PARTS = frozenset({"test", "tests", "benchmark", "benchmarks"})
_MAX_FILE_BYTES = 4_000_000


def _exc_name(node: ast.expr) -> str | None:
    """``ValueError`` for ``ValueError(...)``, ``errors.Bad`` -> ``Bad``; else None."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _looks_like_exception(name: str | None) -> bool:
    """An exception class's name, as the KB's own extraction reads one
    (:func:`ingest.prebuilt.exception_like`), or a ``...Exit``."""
    return bool(name) and (exception_like(str(name)) or str(name).endswith("Exit"))


def _segment(lines: list[str], node: ast.expr) -> str | None:
    """The source text of ``node`` (what :func:`ast.get_source_segment` gives, without
    splitting the whole file again for every node)."""
    end_line, end_col = node.end_lineno, node.end_col_offset
    if end_line is None or end_col is None:
        return None
    first, last = node.lineno - 1, end_line - 1
    if last >= len(lines):
        return None
    if first == last:
        return lines[first].encode()[node.col_offset : end_col].decode("utf-8", "replace")
    head = lines[first].encode()[node.col_offset :].decode("utf-8", "replace")
    tail = lines[last].encode()[:end_col].decode("utf-8", "replace")
    return "\n".join([head, *lines[first + 1 : last], tail])


def _raises(tree: ast.AST, lines: list[str]) -> list[AtlasRaise]:
    out: list[AtlasRaise] = []
    for node in ast.walk(tree):
        exc_type: str | None
        msg: ast.expr | None
        if isinstance(node, ast.Assert):
            exc_type, msg = "AssertionError", node.msg
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc_type = _exc_name(node.exc)
            if not isinstance(node.exc, ast.Call) and not _looks_like_exception(exc_type):
                continue  # ``raise err``: kept where ``err`` was built
            args = node.exc.args if isinstance(node.exc, ast.Call) else []
            msg = args[0] if args else None
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _looks_like_exception(_exc_name(node.value))
            and node.value.args
        ):  # err = ValueError(...); ...; raise err
            exc_type, msg = _exc_name(node.value), node.value.args[0]
        else:
            continue
        src = _segment(lines, msg) if msg is not None else None
        out.append(AtlasRaise(node.lineno, node.end_lineno or node.lineno, exc_type, src))
    return sorted(out, key=lambda r: (r.line, r.end_line))


def _functions(tree: ast.AST) -> list[AtlasFunction]:
    out: list[AtlasFunction] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    out.append(
                        AtlasFunction(child.name, qual, start, child.end_lineno or child.lineno)
                    )
                walk(child, qual + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def file_facts(data: bytes, blob: str | None = None) -> FileFacts:
    """The atlas's facts of one file's bytes (functions and raises are empty when Python
    3.11 cannot parse the file; the line hashes are always there)."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        with warnings.catch_warnings():  # old releases' invalid escapes are not ours to report
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        fns: list[AtlasFunction] = []
        raises: list[AtlasRaise] = []
    else:
        fns, raises = _functions(tree), _raises(tree, lines)
    return FileFacts(
        blob=blob or hashlib.sha256(data).hexdigest(),
        line_hashes=tuple(line_hash(s) for s in lines),
        functions=tuple(fns),
        raises=tuple(raises),
    )


def _members(source: Path) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(``sglang/...py`` path, reader) of every module of a wheel or a package folder."""
    if source.is_file():
        zf = zipfile.ZipFile(source)
        for info in zf.infolist():
            name = info.filename
            if (
                name.startswith("sglang/")
                and name.endswith(".py")
                and info.file_size <= _MAX_FILE_BYTES
            ):
                yield name, functools.partial(zf.read, info)
        return
    root = source if source.name == "sglang" else source / "sglang"
    for p in sorted(root.rglob("*.py")):
        if p.stat().st_size <= _MAX_FILE_BYTES:
            yield "sglang/" + p.relative_to(root).as_posix(), p.read_bytes


def atlas_release(atlas: Atlas, version: str, source: Path, *, origin: str | None = None) -> int:
    """Add ``version`` (a wheel file or a package folder) to ``atlas``; the number of
    file contents that were new to it."""
    known = atlas.known_blobs()
    manifest: dict[str, str] = {}
    new: dict[str, FileFacts] = {}
    for path, read in _members(source):
        if _SKIP_PARTS.intersection(path.split("/")[1:-1]):
            continue
        data = read()
        blob = hashlib.sha256(data).hexdigest()
        manifest[path] = blob
        if blob not in known and blob not in new:
            new[blob] = file_facts(data, blob)
    atlas.add_release(version, origin or f"file:{source.name}", manifest, new.values())
    return len(new)


@dataclass
class AtlasFill:
    """What :func:`fill_atlas` did: releases added, already there, and skipped (why)."""

    added: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def fill_atlas(
    atlas: Atlas,
    settings: KBSettings,
    versions: list[str],
    *,
    on_release: Callable[[str, str], None] | None = None,
) -> AtlasFill:
    """Add every release of ``versions`` the atlas lacks, oldest first as given. A wheel
    is downloaded when it is not cached, and deleted again afterwards unless it is a
    default release (``TRIAGE_RELEASES``): the atlas keeps a few megabytes of it."""
    t0 = time.perf_counter()
    out = AtlasFill()
    have = set(atlas.releases())
    for version in versions:
        if version in have:
            out.present.append(version)
            continue
        cached = find_wheel(settings.wheel_dir, version)
        try:
            wheel = cached or download_wheel(
                version, settings.wheel_dir, index_url=settings.pip_index_url
            )
        except Exception as exc:  # an index or pip failure skips this release only
            out.skipped[version] = f"cannot be fetched: {exc}"
            if on_release:
                on_release(version, "skipped")
            continue
        try:
            atlas_release(atlas, version, wheel, origin=f"pypi:{wheel.name}")
        except (OSError, zipfile.BadZipFile) as exc:
            out.skipped[version] = f"cannot be read: {exc}"
        else:
            out.added.append(version)
        finally:
            if cached is None and version not in settings.releases:
                wheel.unlink(missing_ok=True)
        if on_release:
            on_release(version, "added" if version in out.added else "skipped")
    out.seconds = time.perf_counter() - t0
    return out
