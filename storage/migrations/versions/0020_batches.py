"""Batch cards: ``approvals.batch_id`` groups the calls of one model response shown on one card.

One model response that asks ``batch_threshold`` or more calls of one tool under the same
approvers and quorum gets one card; each call keeps its own approval row and payload hash,
and ``batch_id`` (the id of the batch's first row, whose card is the batch's) groups them.
A new nullable column and an index on it: an older release ignores both (it would post a
card per row), so the migration is safe before a rolling deploy.

Revision ID: 0020_batches
Revises: 0019_checkpoints
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_batches"
down_revision = "0019_checkpoints"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("batch_id", sa.String(40), nullable=True))
    op.create_index(
        "ix_approvals_batch",
        "approvals",
        ["batch_id"],
        sqlite_where=sa.text("batch_id IS NOT NULL"),
        postgresql_where=sa.text("batch_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_batch", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("batch_id")
