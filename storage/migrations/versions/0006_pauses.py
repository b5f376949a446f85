"""Every kind of pause in the approvals table: questions, callbacks and retries.

One mechanism: a question to a person, a wait for another system's callback and a retry at a
time are rows of ``approvals`` like an approval, with a ``kind``. ``token_hash`` finds a
callback's row by its token (only the hash is stored); ``due_at`` says when a retry is due,
with a partial index so the ~1 s due check reads only waiting retries. Existing rows are
approvals (server default), so the previous release keeps working against the upgraded
database.

Revision ID: 0006_pauses
Revises: 0005_pending
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_pauses"
down_revision = "0005_pending"
branch_labels = None
depends_on = None

DUE_RETRIES = "status = 'pending' AND kind = 'retry'"


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(16), nullable=False, server_default="approval")
        )
        batch.add_column(sa.Column("token_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("due_at", sa.DateTime(), nullable=True))
        batch.create_unique_constraint("uq_approvals_token_hash", ["token_hash"])
    op.create_index(
        "ix_approvals_due_retries",
        "approvals",
        ["due_at"],
        sqlite_where=sa.text(DUE_RETRIES),
        postgresql_where=sa.text(DUE_RETRIES),
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_due_retries", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_constraint("uq_approvals_token_hash", type_="unique")
        batch.drop_column("due_at")
        batch.drop_column("token_hash")
        batch.drop_column("kind")
