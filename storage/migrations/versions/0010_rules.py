"""Which rule on arguments chose an approval's policy, snapshotted on the approval.

``rule`` is the rule's label ("policies.refund.rules[0]"), ``rule_when`` its condition and
``rule_error`` why the condition could not be evaluated for the call (it then failed closed).
All nullable: approvals no rule chose, and the previous release, which does not know the
columns, keep working against the upgraded database.

Revision ID: 0010_rules
Revises: 0009_reach
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_rules"
down_revision = "0009_reach"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("rule", sa.Text(), nullable=True))
        batch.add_column(sa.Column("rule_when", sa.Text(), nullable=True))
        batch.add_column(sa.Column("rule_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("rule_error")
        batch.drop_column("rule_when")
        batch.drop_column("rule")
