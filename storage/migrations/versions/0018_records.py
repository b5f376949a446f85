"""Records that show what ran: the standing grant a call ran under, and people's names.

``approvals.grant_id`` and ``approvals.grant_until``: for a call a standing grant covered,
which grant and until when it ran (views say "ran under @bo's standing grant (until …)"
rather than "approved by" as if someone had clicked). ``people``: the display name Slack last
gave for a user id ("Ana Diaz (@ana)"), so the command line and the exports, which never ask
Slack, name people rather than print ids. New nullable columns and a new table: an older
release neither reads nor writes them, so the migration is safe before a rolling deploy.

Revision ID: 0018_records
Revises: 0017_run_answers (the lead re-chains it onto 0017 at merge)
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_records"
down_revision = "0017_run_answers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("grant_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("grant_until", sa.DateTime(), nullable=True))
    op.create_table(
        "people",
        sa.Column("user_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("people")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("grant_until")
        batch.drop_column("grant_id")
