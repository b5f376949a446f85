"""Quorum guard on PostgreSQL: the trigger fires only for the UPDATEs it may refuse.

``0014_quorum_guard``'s PostgreSQL trigger called its plpgsql function on every UPDATE of
``approvals.status`` (about 0.03 ms of the server's time each, three a pause -> decide ->
resume cycle: the decision, the execution's start and its end), though only a ``pending ->
approved`` of an approval that needs several approvers can trip it. The trigger is recreated
here with that as its ``WHEN`` (a row trigger's ``WHEN`` may read ``OLD`` and ``NEW`` but no
subquery, so the votes are still counted in the function, which is unchanged): every other
UPDATE no longer calls it. It refuses what it refused before. SQLite's trigger has had the
whole condition as its ``WHEN`` since 0014: unchanged.

A rolling deploy: the trigger is replaced in place (``CREATE OR REPLACE TRIGGER``, PostgreSQL
14 and later), whose lock on ``approvals`` lets reads through and waits only for the writes
in flight, never behind a long read (a report, ``pg_dump``). Dropping it first would take
the table's strongest lock: queued behind any open transaction that had read ``approvals``,
it would have held up every later statement on the table, the replicas' reads included, for
as long as that transaction lasted. The wait for the lock is bounded (``lock_timeout``): past
it the upgrade fails, changing nothing, and can be run again. PostgreSQL 11 to 13 have no
``OR REPLACE`` for triggers: there it is dropped and created, in the same transaction.

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


# How long the upgrade waits for the writes in flight on approvals before it gives up.
LOCK_TIMEOUT = "5s"


def _replace(trigger: str) -> None:
    """In place, in the migration's transaction: no UPDATE runs unguarded meanwhile."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    if (bind.dialect.server_version_info or (0,)) >= (14,):
        op.execute(trigger.replace("CREATE TRIGGER", "CREATE OR REPLACE TRIGGER", 1))
        return
    op.execute(_DROP)
    op.execute(trigger)
