"""Sub-agents (issue 20 section 1): a child run's agent and the parent it works for.

``runs.agent`` names the configured agent (``[agents.NAME]``) a child run is; NULL for the
main agent. ``parent_run_id`` and ``parent_approval_id`` link it to the run that delegated to
it and to that run's ``delegation`` row, which the child's end settles. ``approvals.agent``
names the sub-agent that asked for a call, for its card and every list ("requested by agent
researcher for @ana"). New nullable columns only: an older release reads and writes runs and
approvals as before (it ignores them), so the migration is safe before a rolling deploy.

Revision ID: 0026_delegations
Revises: 0025_api_requests
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0026_delegations"
down_revision = "0025_api_requests"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("agent", sa.String(64), nullable=True))
        batch.add_column(sa.Column("parent_run_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("parent_approval_id", sa.String(40), nullable=True))
    op.create_index("ix_runs_parent_run_id", "runs", ["parent_run_id"])
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("agent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("agent")
    op.drop_index("ix_runs_parent_run_id", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("parent_approval_id")
        batch.drop_column("parent_run_id")
        batch.drop_column("agent")
