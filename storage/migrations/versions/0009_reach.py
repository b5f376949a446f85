"""Reach the approvers: DM copies of cards, one reminder, one escalation; App Home refreshes
driven from the database (who opened their Home, whose Home must be published again).

Only new tables: an older release ignores them, so the migration is safe to apply before a
rolling deploy replaces it.

Revision ID: 0009_reach
Revises: 0008_grants
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_reach"
down_revision = "0008_grants"
branch_labels = None
depends_on = None

DMS_TO_SEND = "dms_sent_at IS NULL"
REMINDERS_DUE = "reminded_at IS NULL AND remind_at IS NOT NULL"
ESCALATIONS_DUE = "escalated_at IS NULL AND escalate_at IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "approval_reach",
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("dms_claimed_until", sa.DateTime(), nullable=True),
        sa.Column("dms_sent_at", sa.DateTime(), nullable=True),
        sa.Column("remind_at", sa.DateTime(), nullable=True),
        sa.Column("reminded_at", sa.DateTime(), nullable=True),
        sa.Column("escalate_at", sa.DateTime(), nullable=True),
        sa.Column("escalated_at", sa.DateTime(), nullable=True),
        sa.Column("escalate_to", sa.Text(), nullable=False),
    )
    for name, column, where in (
        ("ix_approval_reach_dms", "approval_id", DMS_TO_SEND),
        ("ix_approval_reach_remind", "remind_at", REMINDERS_DUE),
        ("ix_approval_reach_escalate", "escalate_at", ESCALATIONS_DUE),
    ):
        op.create_index(
            name,
            "approval_reach",
            [column],
            sqlite_where=sa.text(where),
            postgresql_where=sa.text(where),
        )
    op.create_table(
        "approval_messages",
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("recipient", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("ts", sa.String(64), nullable=False),
        sa.Column("posted_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "home_viewers",
        sa.Column("team_id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(64), primary_key=True),
        sa.Column("opened_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "home_dirty",
        sa.Column("team_id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(64), primary_key=True),
        sa.Column("since", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_home_dirty_since", "home_dirty", ["since"])


def downgrade() -> None:
    op.drop_index("ix_home_dirty_since", table_name="home_dirty")
    op.drop_table("home_dirty")
    op.drop_table("home_viewers")
    op.drop_table("approval_messages")
    for name in ("ix_approval_reach_escalate", "ix_approval_reach_remind", "ix_approval_reach_dms"):
        op.drop_index(name, table_name="approval_reach")
    op.drop_table("approval_reach")
