"""Alembic's environment: always online, on the connection :func:`kb.records_db.upgrade`
hands over (already in its locked transaction, which it commits)."""

from __future__ import annotations

from alembic import context

__all__: list[str] = []

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
