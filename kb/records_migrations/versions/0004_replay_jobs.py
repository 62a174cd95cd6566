"""Durable replay jobs, one per replay cache key, and the triages waiting on each.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

__all__ = ["downgrade", "upgrade"]


def upgrade() -> None:
    op.create_table(
        "replay_jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.Text, nullable=False, unique=True),
        sa.Column("client", sa.Text, nullable=False),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("worker", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("claimed_at", sa.Float),
        sa.Column("lease_until", sa.Float),
        sa.Column("finished", sa.Float),
        sa.Column("error", sa.Text),
    )
    op.create_index("ix_replay_jobs_next", "replay_jobs", ["state", "rank", "id"])
    op.create_table(
        "replay_job_triages",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("tid", sa.Text, primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("replay_job_triages")
    op.drop_table("replay_jobs")
