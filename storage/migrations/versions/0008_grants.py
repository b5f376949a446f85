"""Standing grants: a tool allowed without a card in one Slack thread until a time.

Only a new table: an older release ignores it, so the migration is safe to apply before a
rolling deploy replaces it.

Revision ID: 0008_grants
Revises: 0007_oauth
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_grants"
down_revision = "0007_oauth"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "grants",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("team_id", sa.String(32), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("thread_ts", sa.String(64), nullable=False),
        sa.Column("tool_name", sa.String(255), nullable=False),
        sa.Column("payload_scope", sa.String(64), nullable=True),
        sa.Column("grantor", sa.String(64), nullable=False),
        sa.Column("grantor_groups", sa.JSON(), nullable=False),
        sa.Column("approval_id", sa.String(40), nullable=True),
        sa.Column("run_id", sa.String(40), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_by", sa.String(64), nullable=True),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
        sa.Column("expiry_noticed_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_grants_thread", "grants", ["team_id", "channel", "thread_ts", "tool_name"])
    op.create_index("ix_grants_channel_expires", "grants", ["team_id", "channel", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_grants_channel_expires", table_name="grants")
    op.drop_index("ix_grants_thread", table_name="grants")
    op.drop_table("grants")
