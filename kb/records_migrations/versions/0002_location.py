"""The result's location in indexed columns (``similar`` without ``json_extract``).

``triages.loc_path`` and ``loc_function`` are back-filled from every stored result
that decodes; a damaged one keeps NULLs (it was never found by ``similar`` either).
Also indexes ``triages.created`` for the age limit of the purge.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

__all__ = ["downgrade", "upgrade"]

_BATCH = 500


def _location(text: str | None) -> tuple[str | None, str | None]:
    try:
        loc = json.loads(text or "").get("location") or {}
        path, function = loc.get("path"), loc.get("function")
    except (ValueError, RecursionError, AttributeError):
        return None, None
    return (
        path if isinstance(path, str) else None,
        function if isinstance(function, str) else None,
    )


def upgrade() -> None:
    op.add_column("triages", sa.Column("loc_path", sa.Text))
    op.add_column("triages", sa.Column("loc_function", sa.Text))
    op.create_index("ix_triages_location", "triages", ["loc_path", "loc_function"])
    op.create_index("ix_triages_created", "triages", ["created"])
    bind = op.get_bind()
    table = sa.table(
        "triages",
        sa.column("id", sa.Text),
        sa.column("result", sa.Text),
        sa.column("loc_path", sa.Text),
        sa.column("loc_function", sa.Text),
    )
    last = ""
    while True:  # in primary-key pages: never the whole table in memory
        rows = bind.execute(
            sa.select(table.c.id, table.c.result)
            .where(table.c.id > last)
            .order_by(table.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        for tid, result in rows:
            path, function = _location(result)
            if path is not None or function is not None:
                bind.execute(
                    table.update()
                    .where(table.c.id == tid)
                    .values(loc_path=path, loc_function=function)
                )
        last = rows[-1][0]


def downgrade() -> None:
    op.drop_index("ix_triages_created", "triages")
    op.drop_index("ix_triages_location", "triages")
    op.drop_column("triages", "loc_function")
    op.drop_column("triages", "loc_path")
