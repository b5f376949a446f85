"""People's names: the decider's display name stored with a decision; and the index
``/approvals history`` reads a channel's latest decisions through.

One nullable column and one index: an older release neither reads nor writes them, so the
migration is safe to apply before a rolling deploy replaces it.

Revision ID: 0011_names
Revises: 0010_rules
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_names"
down_revision = "0010_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("decided_by_name", sa.String(255), nullable=True))
    op.create_index(
        "ix_approvals_decided_channel",
        "approvals",
        ["team_id", "channel", "decided_at"],
        sqlite_where=sa.text("decided_at IS NOT NULL"),
        postgresql_where=sa.text("decided_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_decided_channel", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("decided_by_name")
