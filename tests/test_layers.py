"""The design card's layers: the import-linter contracts hold, break when an arrow is broken,
and no package imports another in a cycle at any level."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from ingest import pipeline

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("kb", "ingest", "service", "evals")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(cwd / "pyproject.toml")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
    )


def test_contracts_hold() -> None:
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "0 broken" in proc.stdout


def test_breaking_an_arrow_fails(tmp_path: Path) -> None:
    for part in PARTS:
        shutil.copytree(
            ROOT / part,
            tmp_path / part,
            ignore=shutil.ignore_patterns("__pycache__", "static", "incidents"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    answer = tmp_path / "service" / "engine" / "answer.py"
    answer.write_text(answer.read_text() + "\nimport ingest.pipeline  # noqa: E402,F401\n")
    proc = _lint(tmp_path)
    assert proc.returncode != 0
    assert "The engine imports kb only" in proc.stdout and "BROKEN" in proc.stdout


def _cycles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, str]]:
    """Pairs of sibling sub-packages/modules of ``package`` that import each other (directly
    or through other siblings)."""
    children = sorted(graph.find_children(package)) if package else list(PARTS)
    reach: dict[str, set[str]] = {}
    for child in children:
        mods = {child} | graph.find_descendants(child)
        out: set[str] = set()
        for m in mods:
            for imported in graph.find_modules_directly_imported_by(m):
                for other in children:
                    if other != child and (imported == other or imported.startswith(other + ".")):
                        out.add(other)
        reach[child] = out
    # transitive closure
    changed = True
    while changed:
        changed = False
        for c in children:
            extra = set().union(*(reach[o] for o in reach[c])) - reach[c] if reach[c] else set()
            if extra:
                reach[c] |= extra
                changed = True
    return [(a, b) for a in children for b in reach[a] if a < b and a in reach[b]]


def test_no_package_level_cycles() -> None:
    graph = grimp.build_graph(*PARTS)
    packages = [""] + sorted(m for m in graph.modules if graph.find_children(m))
    found = {p or "<top>": _cycles(graph, p) for p in packages}
    assert {p: c for p, c in found.items() if c} == {}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and not n.level
    ]


def test_outside_the_engine_only_its_public_api() -> None:
    offenders = []
    for part in ("service", "evals"):
        for path in (ROOT / part).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("service", "engine") or "stubs" in rel.parts:
                continue
            offenders += [f"{rel}: {m}" for m in _imports(path) if m.startswith("service.engine.")]
    assert offenders == []


def test_code_fingerprint_covers_what_shapes_the_kb() -> None:
    """Every kb module that the extraction code (ingest's modules and sub-packages but
    :data:`ingest.pipeline.NOT_EXTRACTION`) imports is hashed with it."""
    used = set()
    for path in (ROOT / "ingest").rglob("*.py"):
        if path.relative_to(ROOT / "ingest").parts[0] in pipeline.NOT_EXTRACTION:
            continue
        used |= {m.split(".")[1] for m in _imports(path) if m.startswith("kb.")}
    assert used <= set(pipeline.KB_SHAPING)


@pytest.mark.parametrize("part", PARTS)
def test_parts_declare_their_public_names(part: str) -> None:
    module = __import__(part)
    assert module.__all__, part
    for name in module.__all__:
        assert (
            hasattr(module, name)
            or (ROOT / part / f"{name}.py").exists()
            or (ROOT / part / name).is_dir()
        ), (part, name)


def test_modules_stay_under_about_500_lines() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for part in PARTS
        for p in (ROOT / part).rglob("*.py")
        if "stubs" not in p.parts
    }
    assert {p: n for p, n in sizes.items() if n > 500} == {}


def test_no_module_imports_another_modules_private_name() -> None:
    """A name used across modules is public in its home module: ``from x import _y`` (our
    own ``x``) appears nowhere in the production code."""
    found = []
    for part in PARTS:
        for path in (ROOT / part).rglob("*.py"):
            if "stubs" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                ours = node.level > 0 or (node.module or "").split(".")[0] in PARTS
                private = [
                    a.name
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
                if ours and private:
                    found.append(f"{path.relative_to(ROOT)}: {node.module} {private}")
    assert found == []
