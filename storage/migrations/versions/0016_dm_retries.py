"""DM copy retries: a copy Slack failed for a while (429, 5xx, a timeout) is tried again.

``dms_retry_at``: the DM copies' next attempt (after a backoff that honours Retry-After);
``dms_attempts``: failed attempts so far; ``dms_given_up``: JSON list of recipients no copy
will be posted to (a permanent error such as ``user_not_found``, or too many attempts).
New nullable columns (or with a server default): an older release ignores them, so the
migration is safe before a rolling deploy.

Revision ID: 0016_dm_retries
Revises: 0015_card_edits_due
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0016_dm_retries"
down_revision = "0015_card_edits_due"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approval_reach") as batch:
        batch.add_column(sa.Column("dms_retry_at", sa.DateTime(), nullable=True))
        batch.add_column(
            sa.Column("dms_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("dms_given_up", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approval_reach") as batch:
        batch.drop_column("dms_given_up")
        batch.drop_column("dms_attempts")
        batch.drop_column("dms_retry_at")
