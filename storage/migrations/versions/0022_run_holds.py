"""Operators' holds on runs (issue 19, "pause and resume"): one row per held run.

A new table only: an older release ignores it (and would resume a held run whose approvals
are decided, as it always did), so the migration is safe before a rolling deploy.

Revision ID: 0022_run_holds
Revises: 0021_recoveries
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0022_run_holds"
down_revision = "0021_recoveries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_holds",
        sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("requested_by", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("requested_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_run_holds_requested_at", "run_holds", ["requested_at"])


def downgrade() -> None:
    op.drop_index("ix_run_holds_requested_at", table_name="run_holds")
    op.drop_table("run_holds")
