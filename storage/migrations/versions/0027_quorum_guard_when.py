"""Quorum guard on PostgreSQL: the trigger fires only for the UPDATEs it may refuse.

``0014_quorum_guard``'s PostgreSQL trigger called its plpgsql function on every UPDATE of
``approvals.status`` (about 0.03 ms of the server's time each, three a pause -> decide ->
resume cycle: the decision, the execution's start and its end), though only a ``pending ->
approved`` of an approval that needs several approvers can trip it. The trigger is recreated
here with that as its ``WHEN`` (a row trigger's ``WHEN`` may read ``OLD`` and ``NEW`` but no
subquery, so the votes are still counted in the function, which is unchanged): every other
UPDATE no longer calls it. It refuses what it refused before. SQLite's trigger has had the
whole condition as its ``WHEN`` since 0014: unchanged. A trigger changes no table: safe for a
rolling deploy.

Revision ID: 0027_quorum_guard_when
Revises: 0026_delegations
Create Date: 2026-12-02
"""

from alembic import op

revision = "0027_quorum_guard_when"
down_revision = "0026_delegations"
branch_labels = None
depends_on = None

# What the function's own test needs of the row, without its count of votes (a subquery).
WHEN = "NEW.status = 'approved' AND OLD.status = 'pending' AND NEW.min_approvals > 1"
_DROP = "DROP TRIGGER IF EXISTS approvals_quorum_guard ON approvals"
_CREATE = (
    "CREATE TRIGGER approvals_quorum_guard BEFORE UPDATE OF status ON approvals "
    "FOR EACH ROW {when}EXECUTE FUNCTION approvals_quorum_guard()"
)
POSTGRES_TRIGGER = _CREATE.format(when=f"WHEN ({WHEN}) ")
# 0014_quorum_guard's.
PREVIOUS_TRIGGER = _CREATE.format(when="")


def upgrade() -> None:
    _replace(POSTGRES_TRIGGER)


def downgrade() -> None:
    _replace(PREVIOUS_TRIGGER)


def _replace(trigger: str) -> None:
    """Drop and create in the migration's transaction: no UPDATE runs between them unguarded."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_DROP)
    op.execute(trigger)
