"""Quorum guard: no approval that needs several approvers becomes ``approved`` without them.

The release before ``0012_quorum`` does not know ``min_approvals``: during a rolling deploy
(or after a rollback) its decide statement would approve a quorum approval on the first
click, and run the call. This trigger refuses, inside the database, any UPDATE that turns a
pending approval with ``min_approvals`` > 1 into ``approved`` while fewer distinct people
than that (never the requester) have an approve vote in ``approval_votes``. This release
records the votes before that UPDATE in the same transaction (storage.votes), so it never
trips; the previous release's click fails with an error instead, and the approval stays
pending for this release's replicas. A trigger changes no table: safe for a rolling deploy.

On SQLite, a later migration that recreates ``approvals`` (batch mode "move and copy")
drops the trigger: recreate it there (tests/storage/test_quorum_guard.py checks it at head).

Revision ID: 0014_quorum_guard
Revises: 0013_edits
Create Date: 2026-11-30
"""

from alembic import op

revision = "0014_quorum_guard"
down_revision = "0013_edits"
branch_labels = None
depends_on = None

_SHORT = (
    "NEW.status = 'approved' AND OLD.status = 'pending' AND NEW.min_approvals > 1 "
    "AND (SELECT count(*) FROM approval_votes WHERE approval_votes.approval_id = NEW.id "
    "AND approval_votes.vote = 'approve' AND approval_votes.voter != NEW.requester) "
    "< NEW.min_approvals"
)
_MESSAGE = "quorum not reached: this approval needs min_approvals distinct approvers"

POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION approvals_quorum_guard() RETURNS trigger AS $$
BEGIN
    IF {_SHORT} THEN
        RAISE EXCEPTION '{_MESSAGE}' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql
"""
POSTGRES_TRIGGER = (
    "CREATE TRIGGER approvals_quorum_guard BEFORE UPDATE OF status ON approvals "
    "FOR EACH ROW EXECUTE FUNCTION approvals_quorum_guard()"
)
SQLITE_TRIGGER = (
    "CREATE TRIGGER approvals_quorum_guard BEFORE UPDATE OF status ON approvals "
    f"FOR EACH ROW WHEN {_SHORT} BEGIN SELECT RAISE(ABORT, '{_MESSAGE}'); END"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRES_FUNCTION)
        op.execute(POSTGRES_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS approvals_quorum_guard" + _on_approvals())
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS approvals_quorum_guard()")


def _on_approvals() -> str:
    return " ON approvals" if op.get_bind().dialect.name == "postgresql" else ""
