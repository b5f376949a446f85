"""Recovery by a person (``on_error = "ask"``): a failed call's ``recovery`` row.

A tool that raised (or whose outcome is unknown) pauses its run on an ``approvals`` row of
kind ``recovery``; no new table, the run lock, resume claim, expiry and card outbox are the
approvals' own. ``attempt``: which failure of the call this row is about (1 for the first);
``recovery_of``: the row whose execution failed or was lost (an approval, a retry or an
earlier recovery), None for an ungated call; ``recovery_cause``: ``error`` or ``unknown``.
New nullable columns: an older release ignores them, so the migration is safe before a
rolling deploy.

Revision ID: 0021_recoveries
Revises: 0020_batches
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_recoveries"
down_revision = "0020_batches"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("recovery_of", sa.String(40), nullable=True))
        batch.add_column(sa.Column("recovery_cause", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("recovery_cause")
        batch.drop_column("recovery_of")
        batch.drop_column("attempt")
