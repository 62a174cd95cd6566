"""The team setup's fixtures: a real PostgreSQL (session), and a fresh database URL per
test, parametrized over the embedded default (SQLite) and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .pg import PostgresServer, find_bindir


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temporary folder on a free port (skipped without the
    binaries: ``sh scripts/install-debian.sh /usr/lib/postgresql/15/bin/initdb postgresql``)."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries missing (/usr/lib/postgresql/*/bin/initdb); "
            "install Debian's postgresql package"
        )
    pytest.importorskip("psycopg", reason="psycopg (the [postgres] extra) is not installed")
    with PostgresServer(bindir) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database's URL: a SQLite file, or a new database on :func:`postgres`."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'records.sqlite'}"
    return request.getfixturevalue("postgres").new_database()
