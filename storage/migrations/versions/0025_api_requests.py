"""The human gate over HTTP (issue 20 section 2): API tokens, the approvals and questions
other systems create through ``/api/v1``, and the outbox of their webhooks.

New tables only: an older release ignores them (an API approval is then decided or expired
like any other, and no webhook is sent), so the migration is safe before a rolling deploy.

Revision ID: 0025_api_requests
Revises: 0024_workflow_steps
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0025_api_requests"
down_revision = "0024_workflow_steps"
branch_labels = None
depends_on = None

UNDELIVERED = "webhook_url IS NOT NULL AND delivered_at IS NULL AND gave_up_at IS NULL"


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("webhook_secret", sa.Text(), nullable=False),
        sa.Column("channels", sa.Text(), nullable=False),
        sa.Column("team_id", sa.String(32), nullable=False, server_default=""),
        sa.Column("requester", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )
    op.create_table(
        "api_requests",
        sa.Column("approval_id", sa.String(40), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("token_id", sa.String(40), sa.ForeignKey("api_tokens.id"), nullable=False),
        sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("body_hash", sa.String(64), nullable=False),
        sa.Column("webhook_url", sa.Text(), nullable=True),
        sa.Column("delivery_id", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("first_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("gave_up_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.String(255), nullable=True),
        sa.UniqueConstraint("token_id", "idempotency_key", name="uq_api_requests_idempotency"),
    )
    op.create_index(
        "ix_api_requests_undelivered",
        "api_requests",
        ["created_at"],
        sqlite_where=sa.text(UNDELIVERED),
        postgresql_where=sa.text(UNDELIVERED),
    )


def downgrade() -> None:
    op.drop_index("ix_api_requests_undelivered", table_name="api_requests")
    op.drop_table("api_requests")
    op.drop_table("api_tokens")
