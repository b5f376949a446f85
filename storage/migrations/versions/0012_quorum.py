"""Quorum: approvals that need several distinct approvers, and their votes.

``approvals.min_approvals`` is snapshotted from the policy when the approval is requested
(server default 1: every existing row, and every row the previous release writes, needs one
approval as before); ``approvals.approved_by`` lists who approved so far (nullable: the
previous release never sets it). ``approval_votes`` holds one vote per person and approval,
so the same person approving twice counts once. The schema is safe to apply before a rolling
deploy, but the previous release's decide statement knows no quorum and would approve on the
first click: 0014_quorum_guard guards that in the database, and docs/deploy.md says to enable
min_approvals > 1 only once every replica runs this release.

Revision ID: 0012_quorum
Revises: 0011_names
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_quorum"
down_revision = "0011_names"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(
            sa.Column("min_approvals", sa.Integer(), nullable=False, server_default="1")
        )
        batch.add_column(sa.Column("approved_by", sa.JSON(), nullable=True))
    op.create_table(
        "approval_votes",
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("voter", sa.String(64), primary_key=True),
        sa.Column("vote", sa.String(16), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("approval_votes")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("approved_by")
        batch.drop_column("min_approvals")
