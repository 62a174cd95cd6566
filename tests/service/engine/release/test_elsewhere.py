"""The atlas of every release (:mod:`kb.atlas`) in release resolution: a traceback or a
message from a release the KB has not ingested names that release (``elsewhere``), so that
it can be ingested without any hint in the log.

The KB holds 0.5.9 (structure only); the atlas holds 0.5.9 and 0.5.12. Every log here is
built from 0.5.12's own source with ``ast`` (the test's reading, not the atlas's)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ingest.atlas import atlas_release
from ingest.pipeline import index_structure
from kb.atlas import ATLAS_FILE, Atlas
from kb.knowledge import KnowledgeBase
from kb.store import Store
from service.engine.logparse.parse import parse_log
from service.engine.release.resolve import elsewhere_release, resolve_release
from service.settings import Settings

BASE, OTHER = "0.5.9", "0.5.12"
SA = "sglang/srt/server_args.py"


def _server_args(package: Path) -> tuple[list[str], ast.ClassDef]:
    text = (package / "srt" / "server_args.py").read_text()
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    return text.splitlines(), cls


def _literal_messages(package: Path) -> dict[str, str]:
    """``raise ValueError("...")`` messages of ``ServerArgs`` that are one plain string,
    mapped to their exception type."""
    _, cls = _server_args(package)
    out: dict[str, str] = {}
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Raise)
            and isinstance(node.exc, ast.Call)
            and isinstance(node.exc.func, ast.Name)
            and node.exc.args
            and isinstance(node.exc.args[0], ast.Constant)
            and isinstance(node.exc.args[0].value, str)
        ):
            out[node.exc.args[0].value] = node.exc.func.id
    return out


@pytest.fixture(scope="module")
def small(kb_settings: Settings, sglang_source, tmp_path_factory) -> Store:
    settings = kb_settings.model_copy(
        update={"kb_dir": tmp_path_factory.mktemp("elsewhere"), "on_demand_ingest": False}
    )
    kb = KnowledgeBase(settings)
    index_structure(kb, sglang_source(BASE))
    atlas = Atlas(settings.kb_path / ATLAS_FILE)
    for v in (BASE, OTHER):
        atlas_release(atlas, v, sglang_source(v).package_dir)
    return kb.store


def test_a_traceback_of_a_release_not_ingested_names_it(small: Store, sglang_source) -> None:
    lines, cls = _server_args(sglang_source(OTHER).package_dir)
    fn, node = next(
        (f, n)
        for f in cls.body
        if isinstance(f, ast.FunctionDef)
        for n in ast.walk(f)
        if isinstance(n, ast.Assert) and n.msg is None and n.lineno == n.end_lineno
    )
    log = (
        "Traceback (most recent call last):\n"
        f'  File "/opt/venv/lib/python3.11/site-packages/{SA}", line {node.lineno}, '
        f"in {fn.name}\n    {lines[node.lineno - 1].strip()}\nAssertionError\n"
    )
    res = resolve_release(parse_log(log), small)
    assert res.release == BASE  # answered from what the KB holds...
    fit = res.elsewhere
    assert fit and fit.basis == "frames" and fit.wanted == OTHER and OTHER in fit.releases
    assert BASE not in fit.releases and fit.atlas_releases == 2
    assert res.confidence <= 0.4  # ...and it says so
    assert res.note and f"ingest --release {OTHER}" in res.note
    assert elsewhere_release(parse_log(log), small) == OTHER


def test_a_message_raised_only_by_a_release_not_ingested_names_it(
    small: Store, sglang_source
) -> None:
    base = _literal_messages(sglang_source(BASE).package_dir)
    new = {
        m: t
        for m, t in _literal_messages(sglang_source(OTHER).package_dir).items()
        if m not in base and len(m) >= 30 and not any(m[:25] in b for b in base)
    }
    assert new, "0.5.12 raises no new literal message in ServerArgs"
    message, exc_type = sorted(new.items())[0]
    res = resolve_release(parse_log(f"{exc_type}: {message}\n"), small)
    fit = res.elsewhere
    assert fit and fit.basis == "message" and fit.wanted == OTHER and fit.releases == [OTHER]
    assert SA in fit.evidence


def test_a_log_the_ingested_release_explains_says_nothing_of_elsewhere(
    small: Store, sglang_source
) -> None:
    lines, cls = _server_args(sglang_source(BASE).package_dir)
    fn = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__post_init__")
    stmt = lines[fn.body[0].lineno - 1].strip()
    log = (
        "Traceback (most recent call last):\n"
        f'  File "/x/site-packages/{SA}", line {fn.body[0].lineno}, in __post_init__\n'
        f"    {stmt}\nValueError: nope\n"
    )
    res = resolve_release(parse_log(log), small)
    assert res.release == BASE and res.method == "fingerprint"
    assert "elsewhere" not in res.model_dump()
    assert elsewhere_release(parse_log(log), small) is None
