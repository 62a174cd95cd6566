"""Alembic scripts of the records database (see :mod:`kb.records_db`); run on open."""
