"""The listing's and the sweeper's indexes hold pending approvals only (partial indexes).

``/approvals`` pages, their counts and the sweeper's expiry scan only ever look for
``status = 'pending'``. The full indexes they used kept every approval ever decided, so the
expiry scan (``expires_at <= now``) walked the whole history, and every status change of an
approval (approved, executing, executed) rewrote its entries in two of them. Partial indexes
stay as small as what is waiting, and an approval leaves them once, at its decision. Both
SQLite (3.8+) and PostgreSQL support them; the queries name ``status = 'pending'`` literally,
which is what lets both planners use them.

The audit's approval index leaves out the events that name no approval (a run's started,
paused, resumed, completed): writing them then touches one index page fewer, and an
approval's trail (``approval_id = …``) still uses it.

Revision ID: 0005_pending
Revises: 0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_pending"
down_revision = "0004"
branch_labels = None
depends_on = None

PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    op.create_index(
        "ix_approvals_pending_created",
        "approvals",
        ["created_at", "id"],
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
    op.create_index(
        "ix_approvals_pending_channel",
        "approvals",
        ["team_id", "channel", "created_at", "id"],
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
    op.create_index(
        "ix_approvals_pending_expires",
        "approvals",
        ["expires_at"],
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
    op.drop_index("ix_approvals_status_created", table_name="approvals")
    op.drop_index("ix_approvals_channel_status", table_name="approvals")
    op.drop_index("ix_approvals_expires_at", table_name="approvals")
    op.create_index(
        "ix_audit_events_approval",
        "audit_events",
        ["approval_id"],
        sqlite_where=sa.text("approval_id IS NOT NULL"),
        postgresql_where=sa.text("approval_id IS NOT NULL"),
    )
    op.drop_index("ix_audit_events_approval_id", table_name="audit_events")


def downgrade() -> None:
    op.create_index("ix_audit_events_approval_id", "audit_events", ["approval_id"])
    op.drop_index("ix_audit_events_approval", table_name="audit_events")
    op.create_index("ix_approvals_expires_at", "approvals", ["expires_at"])
    op.create_index(
        "ix_approvals_channel_status",
        "approvals",
        ["team_id", "channel", "status", "created_at", "id"],
    )
    op.create_index("ix_approvals_status_created", "approvals", ["status", "created_at", "id"])
    op.drop_index("ix_approvals_pending_expires", table_name="approvals")
    op.drop_index("ix_approvals_pending_channel", table_name="approvals")
    op.drop_index("ix_approvals_pending_created", table_name="approvals")
