"""Owners and sizes: ``triages.owner``, ``triages.confirmed_by`` and ``triages.size``.

``owner`` is who stored the triage and ``confirmed_by`` who wrote its confirmation
(``key:<hash of the API key>``, ``slack:<user>`` or ``client:<address>``); rows stored
before this revision keep NULLs (legacy records, see ``service.api.access``). The
``confirmations`` table keeps its columns, so an older process's inserts still fit. ``size`` is the bytes of the request and result text, back-filled
here for every stored triage, so the records' byte bound counts what is already stored.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

__all__ = ["downgrade", "upgrade"]


def upgrade() -> None:
    op.add_column("triages", sa.Column("owner", sa.Text))
    op.add_column("triages", sa.Column("size", sa.BigInteger))
    op.add_column("triages", sa.Column("confirmed_by", sa.Text))
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "UPDATE triages SET size = coalesce(length(CAST(request AS BLOB)), 0)"
            " + coalesce(length(CAST(result AS BLOB)), 0)"
        )
    else:
        op.execute(
            "UPDATE triages SET size = coalesce(octet_length(request), 0)"
            " + coalesce(octet_length(result), 0)"
        )


def downgrade() -> None:
    op.drop_column("triages", "confirmed_by")
    op.drop_column("triages", "size")
    op.drop_column("triages", "owner")
