"""PostgreSQL's one-statement forms of an approved call's start and of its recording.

Owns no state; the rows are :mod:`storage.stores.executions`'s. Each statement does the
common case of its transaction (``approved -> executing`` with the claimed run's start,
``executing -> executed`` with the lease's renewal) with its audit row, in one round trip
(data-modifying CTEs, ``Mode.WRITE_ONE``: autocommit). Each changes nothing unless every
condition of that case holds; it then returns no row and the store runs the full
transaction instead (:mod:`storage.sql.approvals`), which handles the rest. PostgreSQL only.

Lock order: the run's row first, as every transaction takes them (see ``LOCK_RUN`` in
:mod:`storage.sql.runs`). The ``run`` CTE takes it; the approval's UPDATE reads ``run``
through an uncorrelated subquery of its WHERE (an InitPlan), which is evaluated before the
UPDATE locks the approval's row.
"""

from __future__ import annotations

from storage.sql.approvals import HOLD_OF_APPROVAL_RUN
from storage.sql.events import audited_postgres
from storage.sql.runs import RUN_UNCHANGED_SINCE_SNAPSHOT

_RUN_OF_CALL = "(SELECT run_id FROM approvals WHERE id = :id)"
_NOT_HELD = "NOT EXISTS (SELECT 1 FROM run_holds WHERE run_holds.run_id = {run})"


def _begin_fenced(stop_if_held: bool) -> str:
    # The run's row, locked: the lease check is then the run's latest version's, even after
    # waiting for the lock (a take-over that committed meanwhile fences the start, as the
    # separate statements of the full transaction do). With ``stop_if_held``, a held run is
    # not even locked: nothing is written and the full transaction raises RunHeld.
    held = f" AND {_NOT_HELD.format(run='runs.id')}" if stop_if_held else ""
    run = (
        f"run AS (SELECT id FROM runs WHERE id = {_RUN_OF_CALL} AND lease_owner = :owner"
        # A hold asked for after this statement's snapshot (its lock waited on) is not in the
        # snapshot: the run's newer row says so, and the full transaction starts instead.
        f"{held} AND {RUN_UNCHANGED_SINCE_SNAPSHOT.format(run=_RUN_OF_CALL)} "
        "FOR NO KEY UPDATE), "
        # START_CLAIMED_RUN: its row count decides nothing (the call starts either way), and
        # the row is already this statement's (locked by ``run``).
        "started AS (UPDATE runs SET status = 'running' "
        "WHERE id = (SELECT id FROM run) AND status = 'resuming')"
    )
    change = (
        "UPDATE approvals SET status = 'executing', executed_at = :now "
        "WHERE id = :id AND status = 'approved' AND expires_at > :now "
        "AND run_id = (SELECT id FROM run) "
        f"RETURNING run_id, {HOLD_OF_APPROVAL_RUN}"
    )
    return audited_postgres(change, before=run)


def _begin_unfenced(stop_if_held: bool) -> str:
    held = f" AND {_NOT_HELD.format(run='approvals.run_id')}" if stop_if_held else ""
    return audited_postgres(
        "UPDATE approvals SET status = 'executing', executed_at = :now "
        f"WHERE id = :id AND status = 'approved' AND expires_at > :now{held} "
        f"RETURNING run_id, {HOLD_OF_APPROVAL_RUN}"
    )


# By (fenced, stop_if_held). Returns (run_id, hold) when the call may start; the hold is the
# run's (None with stop_if_held: a held run returns no row).
BEGIN_EXECUTION_ONE = {
    (fenced, stop): (_begin_fenced if fenced else _begin_unfenced)(stop)
    for fenced in (True, False)
    for stop in (True, False)
}

# ``executing -> executed`` with the drive's lease renewed (RENEW_LEASE_OF_APPROVAL) in one
# statement. Returns (run_id, hold, ours). A drive that no longer holds the run records its
# result all the same, except for a call with a checkpoint (HAS_CHECKPOINT): the drive that
# holds the run resumes it, and that attempt's result is the one recorded.
# The run's row is locked first (``fresh``, read by both UPDATEs before they write), and only
# while it is the version this statement's snapshot saw: the hold it returns is the drive's
# next safe point's read (bot.gate.recording), so a hold asked for while this waited for the
# run's lock (committed after the snapshot, with the run's newer row) must not be missed.
# Then nothing is written and the full transaction, whose statements see it, records instead.
RECORD_EXECUTION_RENEWING = audited_postgres(
    "UPDATE approvals SET status = 'executed', result = :result "
    "WHERE id = :id AND status = 'executing' AND EXISTS (SELECT 1 FROM fresh) "
    "AND CASE WHEN EXISTS (SELECT 1 FROM run) THEN TRUE "
    "ELSE NOT EXISTS (SELECT 1 FROM checkpoints WHERE checkpoints.approval_id = :id) END "
    f"RETURNING run_id, {HOLD_OF_APPROVAL_RUN}, EXISTS (SELECT 1 FROM run) AS ours",
    before=(
        f"fresh AS MATERIALIZED (SELECT id FROM runs WHERE id = {_RUN_OF_CALL} "
        f"AND {RUN_UNCHANGED_SINCE_SNAPSHOT.format(run=_RUN_OF_CALL)} FOR NO KEY UPDATE), "
        "run AS (UPDATE runs SET lease_expires_at = :lease_until "
        "WHERE id = (SELECT id FROM fresh) AND lease_owner = :owner RETURNING id)"
    ),
)
