"""Card edits due: a quorum vote's card edit that its replica may not have made.

A vote commits, then its replica edits the card; a crash between the two left the card
showing too few votes until someone clicked again. The vote's transaction now marks the
approval here; the card's edit clears the mark, and the sweeper edits cards marked long ago.
A new table only: an older release ignores it, safe before a rolling deploy.

Revision ID: 0015_card_edits_due
Revises: 0014_quorum_guard
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0015_card_edits_due"
down_revision = "0014_quorum_guard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "card_edits_due",
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("since", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_card_edits_due_since", "card_edits_due", ["since"])


def downgrade() -> None:
    op.drop_index("ix_card_edits_due_since", table_name="card_edits_due")
    op.drop_table("card_edits_due")
