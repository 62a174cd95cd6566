"""Baseline: the two tables the records had before migrations (``triages``, ``confirmations``).

A ``records.sqlite`` written before Alembic has exactly these and is stamped at this
revision instead of running it. On a server each table also gets ``seq`` (the insertion
order SQLite keeps as rowid), drawn from one sequence.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

__all__ = ["downgrade", "upgrade"]


def upgrade() -> None:
    server = op.get_bind().dialect.name != "sqlite"
    if server:
        op.execute(sa.schema.CreateSequence(sa.Sequence("records_seq")))

    def seq() -> list[sa.Column[Any]]:
        return (
            [
                sa.Column(
                    "seq",
                    sa.BigInteger,
                    nullable=False,
                    server_default=sa.text("nextval('records_seq')"),
                )
            ]
            if server
            else []
        )

    op.create_table(
        "triages",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("created", sa.Text),
        sa.Column("request", sa.Text),
        sa.Column("result", sa.Text),
        *seq(),
    )
    op.create_table(
        "confirmations",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("created", sa.Text),
        sa.Column("fix", sa.Text),
        sa.Column("note", sa.Text),
        sa.Column("source", sa.Text),
        *seq(),
    )


def downgrade() -> None:
    op.drop_table("confirmations")
    op.drop_table("triages")
    if op.get_bind().dialect.name != "sqlite":
        op.execute(sa.schema.DropSequence(sa.Sequence("records_seq")))
