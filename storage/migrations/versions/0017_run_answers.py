"""Run answers: the outbox of a run's last message in its thread.

A run's end (its answer, or why it failed or was cancelled) was stored, then posted; a kill
or one failed Slack call in between left "Carrying on…" in the thread for ever. The end's
transaction now writes a row here, with the progress message the answer replaces; whoever
posts it (the run's worker, or any replica's sweeper once a claim runs out) deletes the row.
A new table only: an older release ignores it, safe before a rolling deploy.

Revision ID: 0017_run_answers
Revises: 0016_dm_retries
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_run_answers"
down_revision = "0016_dm_retries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_answers",
        sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("turn", sa.Integer(), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("progress_ts", sa.String(64), nullable=True),
        sa.Column("chunks_posted", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_run_answers_created_at", "run_answers", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_run_answers_created_at", table_name="run_answers")
    op.drop_table("run_answers")
