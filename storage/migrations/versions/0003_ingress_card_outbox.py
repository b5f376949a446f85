"""Approval cards as an outbox: a claim on posting each card, and an index of those to post.

A crash between storing a pause and recording its card's ts left the card unposted for
ever. Posting is now claimed first (``card_claimed_until``, a conditional UPDATE) and the
sweeper posts the cards of pending approvals that have none and no live claim.

Revision ID: 0003_ingress
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_ingress"
down_revision = "0002"
branch_labels = None
depends_on = None

OUTBOX = "status = 'pending' AND card_ts IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("card_claimed_until", sa.DateTime(), nullable=True))
    # Partial: only the few approvals still waiting for a card, however many are pending.
    op.create_index(
        "ix_approvals_card_outbox",
        "approvals",
        ["created_at"],
        sqlite_where=sa.text(OUTBOX),
        postgresql_where=sa.text(OUTBOX),
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_card_outbox", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("card_claimed_until")
