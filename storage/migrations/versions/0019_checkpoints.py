"""Checkpoints of long tool calls: the last state a gated call stored (``bot.pauses.checkpoint``).

A new table only: an older release ignores it (it reports such calls "outcome unknown", as it
always did), so the migration is safe before a rolling deploy.

Revision ID: 0019_checkpoints
Revises: 0018_records
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_checkpoints"
down_revision = "0018_records"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("saved_at", sa.DateTime(), nullable=False),
        sa.Column("saves", sa.Integer(), nullable=False),
        sa.Column("resumes", sa.Integer(), nullable=False),
        sa.Column("saved_by", sa.String(128), nullable=False),
    )
    op.create_index("ix_checkpoints_run_id", "checkpoints", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_checkpoints_run_id", table_name="checkpoints")
    op.drop_table("checkpoints")
