"""Initial schema: runs, approvals, audit events, processed Slack events.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("conversation_key", sa.String(255), nullable=False),
        sa.Column("team_id", sa.String(32), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("thread_ts", sa.String(64), nullable=False),
        sa.Column("requester", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model_id", sa.String(255), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("conversation_key"),
    )
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("tool_call_id", sa.String(128), nullable=False),
        sa.Column("tool_name", sa.String(255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("payload_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("requester", sa.String(64), nullable=False),
        sa.Column("team_id", sa.String(32), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("thread_ts", sa.String(64), nullable=False),
        sa.Column("approvers", sa.JSON(), nullable=False),
        sa.Column("allow_self_approval", sa.Boolean(), nullable=False),
        sa.Column("on_expiry", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("decided_by", sa.String(64), nullable=True),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("executed_at", sa.DateTime(), nullable=True),
        sa.Column("card_channel", sa.String(64), nullable=True),
        sa.Column("card_ts", sa.String(64), nullable=True),
        sa.UniqueConstraint("run_id", "tool_call_id", name="uq_approvals_run_tool_call"),
    )
    op.create_index("ix_approvals_requester", "approvals", ["requester"])
    op.create_index("ix_approvals_expires_at", "approvals", ["expires_at"])
    op.create_index("ix_approvals_status_created", "approvals", ["status", "created_at"])
    op.create_index("ix_approvals_run_turn_status", "approvals", ["run_id", "turn", "status"])
    op.create_index(
        "ix_approvals_channel_status",
        "approvals",
        ["team_id", "channel", "status", "created_at"],
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("run_id", sa.String(40), nullable=True),
        sa.Column("approval_id", sa.String(40), nullable=True),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(64), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
    )
    op.create_index("ix_audit_events_run_id", "audit_events", ["run_id"])
    op.create_index("ix_audit_events_approval_id", "audit_events", ["approval_id"])
    op.create_table(
        "processed_events",
        sa.Column("event_id", sa.String(128), primary_key=True),
        sa.Column("received_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_processed_events_received_at", "processed_events", ["received_at"])


def downgrade() -> None:
    op.drop_table("processed_events")
    op.drop_table("audit_events")
    op.drop_table("approvals")
    op.drop_table("runs")
