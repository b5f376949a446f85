"""Edit, then approve: the policy's allow_edit snapshot and the edited arguments.

New columns only, nullable or with a server default: an older release ignores them (and its
inserts get ``allow_edit = false``), so the migration is safe before a rolling deploy.

Revision ID: 0013_edits
Revises: 0012_quorum
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_edits"
down_revision = "0012_quorum"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(
            sa.Column("allow_edit", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("edited_arguments", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("edited_by", sa.String(64), nullable=True))
        batch.add_column(sa.Column("edited_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("edited_at")
        batch.drop_column("edited_by")
        batch.drop_column("edited_arguments")
        batch.drop_column("allow_edit")
