"""Multi-workspace installs: installations (bot tokens, refresh tokens) and OAuth states.

Only new tables: an older release ignores them, so the migration is safe to apply before a
rolling deploy replaces it.

Revision ID: 0007_oauth
Revises: 0006_pauses
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_oauth"
down_revision = "0006_pauses"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_installations",
        sa.Column("workspace", sa.String(80), primary_key=True),
        sa.Column("enterprise_id", sa.String(32), nullable=False),
        sa.Column("team_id", sa.String(32), nullable=False),
        sa.Column("bot", sa.Text(), nullable=False),
        sa.Column("installation", sa.Text(), nullable=False),
        sa.Column("installed_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_slack_installations_team_id", "slack_installations", ["team_id"])
    op.create_table(
        "slack_oauth_states",
        sa.Column("state", sa.String(128), primary_key=True),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_slack_oauth_states_expires_at", "slack_oauth_states", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_slack_oauth_states_expires_at", table_name="slack_oauth_states")
    op.drop_table("slack_oauth_states")
    op.drop_index("ix_slack_installations_team_id", table_name="slack_installations")
    op.drop_table("slack_installations")
