"""The agent's reason on the card: ``approvals.why``.

The model's text that came with the response asking for the call (its "why"), cut to what
the card shows; None when the response said nothing. A new nullable column: an older
release ignores it, so the migration is safe before a rolling deploy.

Revision ID: 0023_call_reasons
Revises: 0022_run_holds
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0023_call_reasons"
down_revision = "0022_run_holds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("why", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("why")
