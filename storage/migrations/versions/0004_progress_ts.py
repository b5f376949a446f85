"""Where a run's progress message is, so whoever publishes its outcome replaces it.

The ts of the "Working on it…" message was only in the memory of the worker that posted it:
a replica taking the run over after a crash posted its answer as a new message, and the
hourglass stayed in the thread for ever. Nullable, so the previous release, which does not
know the column, keeps working against the upgraded database.

Revision ID: 0004
Revises: 0003_ingress
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003_ingress"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("progress_ts", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("progress_ts")
