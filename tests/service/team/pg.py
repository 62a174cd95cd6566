"""A real PostgreSQL server for the tests: ``initdb`` in a temporary folder, on a free port.

Debian's server binaries live in ``/usr/lib/postgresql/<major>/bin``; the newest one
there is used. ``initdb`` refuses to run as root, so as root the server runs as the
``postgres`` user (the folder is handed to it); otherwise as the current user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

__all__ = ["PostgresServer", "find_bindir"]


def find_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that has ``initdb`` and ``pg_ctl``."""
    found = [
        p
        for p in Path("/usr/lib/postgresql").glob("*/bin")
        if (p / "initdb").is_file() and (p / "pg_ctl").is_file()
    ]
    return max(
        found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, default=None
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """``with PostgresServer(bindir) as pg: pg.new_database()`` -> a fresh database's URL."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="triage-pg-"))
        self.data = self.folder / "data"
        self.as_root = os.geteuid() == 0
        self.user = "postgres"

    def _run(self, *argv: str) -> None:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def __enter__(self) -> PostgresServer:
        if self.as_root:
            uid = pwd.getpwnam("postgres").pw_uid
            os.chown(self.folder, uid, -1)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            self.user,
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        opts = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c synchronous_commit=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            opts,
            "start",
        )
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        time.sleep(0.1)
        shutil.rmtree(self.folder, ignore_errors=True)
