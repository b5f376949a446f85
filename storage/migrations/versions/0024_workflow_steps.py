"""Workflow Builder steps (issue 21 section 3): one row per execution of the custom step
``request_approval``, and the outbox of its completion.

A new table only: an older release ignores it (a step's approval is then decided or expired
like any other, and nothing completes the step), so the migration is safe before a rolling
deploy.

Revision ID: 0024_workflow_steps
Revises: 0023_call_reasons
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0024_workflow_steps"
down_revision = "0023_call_reasons"
branch_labels = None
depends_on = None

UNCOMPLETED = "completed_at IS NULL"


def upgrade() -> None:
    op.create_table(
        "workflow_steps",
        sa.Column("function_execution_id", sa.String(64), primary_key=True),
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), nullable=False),
        sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("team_id", sa.String(32), nullable=False),
        sa.Column("workflow_execution_id", sa.String(64), nullable=False),
        sa.Column("token", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("completion", sa.String(16), nullable=True),
        sa.Column("last_error", sa.String(255), nullable=True),
        sa.UniqueConstraint("approval_id", name="uq_workflow_steps_approval_id"),
    )
    op.create_index(
        "ix_workflow_steps_uncompleted",
        "workflow_steps",
        ["created_at"],
        sqlite_where=sa.text(UNCOMPLETED),
        postgresql_where=sa.text(UNCOMPLETED),
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_steps_uncompleted", table_name="workflow_steps")
    op.drop_table("workflow_steps")
