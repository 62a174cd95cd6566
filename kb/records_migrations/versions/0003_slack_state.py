"""The Slack bot's state, shared by every process on the database: event ids seen,
thread contexts and per-channel token buckets.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

__all__ = ["downgrade", "upgrade"]


def upgrade() -> None:
    op.create_table(
        "slack_seen",
        sa.Column("namespace", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("ix_slack_seen_expires", "slack_seen", ["expires"])
    op.create_table(
        "slack_threads",
        sa.Column("channel", sa.Text, primary_key=True),
        sa.Column("thread_ts", sa.Text, primary_key=True),
        sa.Column("context", sa.Text, nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
    )
    op.create_index("ix_slack_threads_updated", "slack_threads", ["updated"])
    op.create_table(
        "slack_buckets",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("tokens", sa.Float, nullable=False),
        sa.Column("last", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("slack_buckets")
    op.drop_table("slack_threads")
    op.drop_table("slack_seen")
