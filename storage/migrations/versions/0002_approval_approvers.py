"""Approvals keyed by turn; index who may decide them and their listing order.

"/approvals" (what may I approve) scanned the JSON approvers list of every pending approval:
78 ms at 100,000 pending rows. One row per (approver, approval) makes it an index lookup.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Tool call ids are only unique within one model response: key approvals by turn too.
    with op.batch_alter_table("approvals") as batch:
        batch.drop_constraint("uq_approvals_run_tool_call", type_="unique")
        batch.create_unique_constraint(
            "uq_approvals_run_turn_call", ["run_id", "turn", "tool_call_id"]
        )
    op.create_table(
        "approval_approvers",
        sa.Column("approver", sa.String(64), primary_key=True),
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), primary_key=True),
    )
    op.drop_index("ix_approvals_run_turn_status", table_name="approvals")
    # Pages are ordered by (created_at, id): with id in the index, a page is an index walk
    # that stops after ten matches instead of a sort of every match.
    op.drop_index("ix_approvals_status_created", table_name="approvals")
    op.create_index("ix_approvals_status_created", "approvals", ["status", "created_at", "id"])
    op.drop_index("ix_approvals_channel_status", table_name="approvals")
    op.create_index(
        "ix_approvals_channel_status",
        "approvals",
        ["team_id", "channel", "status", "created_at", "id"],
    )
    connection = op.get_bind()
    rows = connection.execute(sa.text("SELECT id, approvers FROM approvals")).fetchall()
    backfill = []
    for approval_id, approvers in rows:
        names = json.loads(approvers) if isinstance(approvers, str) else approvers
        backfill += [{"approver": a, "approval_id": approval_id} for a in (names or ["*"])]
    if backfill:
        connection.execute(
            sa.text(
                "INSERT INTO approval_approvers (approver, approval_id) "
                "VALUES (:approver, :approval_id)"
            ),
            backfill,
        )


def downgrade() -> None:
    op.drop_index("ix_approvals_channel_status", table_name="approvals")
    op.create_index(
        "ix_approvals_channel_status", "approvals", ["team_id", "channel", "status", "created_at"]
    )
    op.drop_index("ix_approvals_status_created", table_name="approvals")
    op.create_index("ix_approvals_status_created", "approvals", ["status", "created_at"])
    op.create_index("ix_approvals_run_turn_status", "approvals", ["run_id", "turn", "status"])
    op.drop_table("approval_approvers")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_constraint("uq_approvals_run_turn_call", type_="unique")
        batch.create_unique_constraint("uq_approvals_run_tool_call", ["run_id", "tool_call_id"])
