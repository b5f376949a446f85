"""The statements of runs: starting and continuing one, its leases, pausing and ending it.

Owns no state; the ``runs`` rows are the run stores' (:mod:`storage.stores.runs`,
:mod:`storage.stores.leases`, :mod:`storage.stores.pauses`). Every change of status is one
conditional UPDATE whose row count says who won: the lease owner (a worker id plus a token per
drive) fences drives, and the resume claim (``CLAIM_RESUME``) is the only way out of
``paused`` towards running. Also here: the run's lock that serializes the transactions of one
run on PostgreSQL, and cancelling a run's approvals with it. Portable between SQLite (3.35+)
and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from storage.records import ACTIVE_RUN_STATUSES, FINISHED_RUN_STATUSES
from storage.sql.answers import INSERT_ANSWER_OF_FINISHED
from storage.sql.columns import RUN_COLUMNS
from storage.sql.events import audited_postgres

_FINISHED = ", ".join(f"'{s}'" for s in FINISHED_RUN_STATUSES)
_ACTIVE = ", ".join(f"'{s}'" for s in ACTIVE_RUN_STATUSES)
# An approval a failed or cancelled run cancels with it (CANCEL_UNFINISHED_APPROVALS).
_UNFINISHED_APPROVALS = "'pending', 'approved', 'armed', 'due'"

RUN_BY_ID = f"SELECT {RUN_COLUMNS.sql} FROM runs WHERE id = :id"
RUN_BY_KEY = f"SELECT {RUN_COLUMNS.sql} FROM runs WHERE conversation_key = :key"
INSERT_RUN = RUN_COLUMNS.insert_sql(" ON CONFLICT (conversation_key) DO NOTHING")
# PostgreSQL: the new run and its ``run_started`` audit in one statement (audited_postgres).
INSERT_RUN_AUDITED = audited_postgres(f"{INSERT_RUN} RETURNING id AS run_id")
# A whole row as given, conflict or not (benchmarks and tests seed runs with it).
INSERT_RUN_ROW = RUN_COLUMNS.insert_sql()
CONTINUE_RUN = (
    "UPDATE runs SET status = 'running', requester = :requester, model_id = :model_id, "
    "history = :history, turn = :turn, answer = NULL, error = NULL, lease_owner = :lease_owner, "
    "lease_expires_at = :lease_expires_at, updated_at = :updated_at, progress_ts = NULL "
    f"WHERE id = :id AND status IN ({_FINISHED})"
)
# PostgreSQL: the continuation and its ``run_continued`` audit in one statement.
CONTINUE_RUN_AUDITED = audited_postgres(f"{CONTINUE_RUN} RETURNING id AS run_id")
SET_PROGRESS = "UPDATE runs SET progress_ts = :ts WHERE id = :id"
# A pause's waiting message, only while the run still waits: one approved before it was
# posted has resumed, and its resume's progress message is the one on record.
SET_WAITING_PROGRESS = "UPDATE runs SET progress_ts = :ts WHERE id = :id AND status = 'paused'"
# Only the message that was replaced: a newer progress message (a later resume) stays.
CLEAR_PROGRESS = "UPDATE runs SET progress_ts = NULL WHERE id = :id AND progress_ts = :ts"
RENEW_LEASE = (
    "UPDATE runs SET lease_expires_at = :lease_until WHERE id = :id AND lease_owner = :worker"
)
# Shutdown: the leases this worker still holds run out now, so another replica takes their runs
# over at its next sweep instead of a whole run_lease later. The owner stays, for the record.
# A worker owns its claims (``worker``) and its drives' leases (``worker/token``); a prefix
# test, not LIKE, whose ``_`` and ``%`` could match another worker's id.
RELEASE_LEASES = (
    "UPDATE runs SET lease_expires_at = :now "
    "WHERE (lease_owner = :worker OR substr(lease_owner, 1, :prefix_length) = :prefix) "
    f"AND status IN ({_ACTIVE}) AND lease_expires_at > :now "
    "RETURNING id"
)
# Also returns the run's hold: the safe point of the calls whose approval this pause asks
# for (bot.gate.safe_points), in the transaction that would store them.
# For a one-statement transaction (PostgreSQL, autocommit) that reads other tables of a run
# (its hold, its approvals) in its snapshot: true only while the run's row it locks is the
# version its snapshot saw. Under READ COMMITTED a statement that waited for the run's lock
# re-checks that row alone (EvalPlanQual); every transaction that changes what such a
# statement reads about the run writes the run's row (an UPDATE of it, or LOCK_RUN), so a
# newer version means the statement's snapshot may be stale: it changes nothing and the
# full transaction, whose statements each take a new snapshot, runs instead.
RUN_UNCHANGED_SINCE_SNAPSHOT = "runs.xmin = (SELECT r.xmin FROM runs r WHERE r.id = {run})"
_PAUSE = (
    "UPDATE runs SET status = 'paused', history = :history, turn = turn + 1, "
    "lease_owner = NULL, lease_expires_at = NULL, updated_at = :now "
    f"WHERE id = :id AND lease_owner = :worker AND status IN ({_ACTIVE})"
)
PAUSE_RUN = (
    f"{_PAUSE} RETURNING turn, requester, team_id, channel, thread_ts, "
    "(SELECT action FROM run_holds WHERE run_holds.run_id = runs.id), agent"
)
# PostgreSQL's one-statement pause (storage.sql.pauses): PAUSE_RUN only while the run is as
# its drive knows it (the turn, and the columns its approvals copy, are the values its rows
# were made with) and no operator's hold is asked for on it; otherwise nothing, and the whole
# transaction runs as PAUSE_RUN's.
PAUSE_FREE_RUN = (
    f"{_PAUSE} AND turn = :turn AND requester = :requester AND team_id = :team_id "
    "AND channel = :channel AND thread_ts = :thread_ts AND agent IS NOT DISTINCT FROM :agent "
    "AND NOT EXISTS (SELECT 1 FROM run_holds WHERE run_holds.run_id = runs.id) AND "
    + RUN_UNCHANGED_SINCE_SNAPSHOT.format(run=":id")
    + " RETURNING id"
)
FINISH_RUN = (
    "UPDATE runs SET status = :status, answer = :answer, error = :error, lease_owner = NULL, "
    "lease_expires_at = NULL, updated_at = :now{history} "
    f"WHERE id = :id AND lease_owner = :worker AND status IN ({_ACTIVE})"
)
FINISH_RUN_KEEP_HISTORY = FINISH_RUN.format(history="")
FINISH_RUN_WITH_HISTORY = FINISH_RUN.format(history=", history = :history")
# The run's end as a drive makes it, with what ``settle_parent`` reads next (a child's
# parent, fixed when the child is created): the same row, no read of its own.
RETURNING_PARENT = " RETURNING parent_run_id, parent_approval_id"
# A drive's lease owner is ``worker/token``; a decision's claim is already such a drive's (see
# DecisionStore.decide), and runs while ``resuming`` until its first write. Pause and finish
# accept either active status: the lease owner, a token per drive, is what fences drives.
# Another drive of the same worker may still start the run afresh (a new token), which fences
# the claimed one off: the worker's claims are ``worker`` or ``worker/…`` (a prefix test, as
# RELEASE_LEASES).
START_RESUMED_RUN = (
    "UPDATE runs SET status = 'running', lease_owner = :owner, lease_expires_at = :lease_until, "
    "updated_at = :now WHERE id = :id AND status = 'resuming' "
    "AND (lease_owner = :worker OR substr(lease_owner, 1, :prefix_length) = :prefix) "
    f"RETURNING {RUN_COLUMNS.sql}"
)
STALE_RUNS = (
    f"SELECT id FROM runs WHERE status IN ({_ACTIVE}) AND lease_expires_at < :now "
    "ORDER BY updated_at LIMIT :limit"
)
TAKE_OVER_RUN = (
    "UPDATE runs SET status = 'running', lease_owner = :worker, lease_expires_at = :lease_until, "
    "updated_at = :now "
    f"WHERE id = :id AND status IN ({_ACTIVE}) AND lease_expires_at < :now "
    f"RETURNING {RUN_COLUMNS.sql}"
)
# PostgreSQL: taken first by every transaction that can leave a paused run with nothing pending
# (decide, expire, the sweeper's claim), so those transactions of one run take turns. Under
# READ COMMITTED, CLAIM_RESUME's NOT EXISTS alone is a write skew: two deciders each still see
# the other's approval pending and neither claims, stranding the run. Once the lock is held,
# every later statement sees what the previous holder committed. NO KEY UPDATE: it conflicts
# with itself and with UPDATEs of the run (pause, cancel, claim: they queue behind the same
# lock, run row before approvals everywhere), but not with the key-share locks that inserting
# an approval (foreign key to runs) takes. SQLite's BEGIN IMMEDIATE already serializes.
# An UPDATE that changes nothing rather than SELECT ... FOR NO KEY UPDATE: the same lock, and a
# new version of the row (a new xmin), which is how a one-statement transaction that waited
# for this lock, or took its snapshot before this commit, knows its snapshot is older than
# what this transaction wrote (RUN_UNCHANGED_SINCE_SNAPSHOT): a hold, a decision.
LOCK_RUN = "UPDATE runs SET updated_at = updated_at WHERE id = :run_id RETURNING id"
LOCK_RUN_OF_APPROVAL = (
    "UPDATE runs SET updated_at = updated_at "
    "WHERE id = (SELECT run_id FROM approvals WHERE id = :approval_id) RETURNING id"
)
CLAIM_RESUME = (
    "UPDATE runs SET status = 'resuming', lease_owner = :worker, "
    "lease_expires_at = :lease_until, updated_at = :now "
    "WHERE id = :run_id AND status = 'paused' AND NOT EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = :run_id AND approvals.status = 'pending') "
    # An operator's hold (storage.sql.holds) keeps the run paused until someone resumes it.
    "AND NOT EXISTS (SELECT 1 FROM run_holds WHERE run_holds.run_id = :run_id)"
)
# The same claim giving back the claimed run as it now stands (no read of it afterwards).
CLAIM_RESUME_RETURNING = f"{CLAIM_RESUME} RETURNING {RUN_COLUMNS.sql}"
# PostgreSQL: the claim and its ``run_resumed`` audit in one statement (audited_postgres).
CLAIM_RESUME_AUDITED = audited_postgres(f"{CLAIM_RESUME} RETURNING id AS run_id")
CLAIM_RESUME_RETURNING_AUDITED = audited_postgres(CLAIM_RESUME_RETURNING, run_column="id")
# Paused runs that nothing will resume: no approval pending, yet no decision claimed the
# resume (a lost race before LOCK_RUN existed, or a bug). The sweeper's safety net.
STRANDED_RUNS = (
    "SELECT id FROM runs WHERE status = 'paused' AND NOT EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.status = 'pending') "
    "AND NOT EXISTS (SELECT 1 FROM run_holds WHERE run_holds.run_id = runs.id) "
    "ORDER BY updated_at LIMIT :limit"
)
# A Workflow Builder step's run (status ``step``, storage.sql.steps) is cancelled the same way
# while its approval is still pending; once decided, the step completes with the decision.
CANCEL_PAUSED_RUN = (
    "UPDATE runs SET status = 'cancelled', error = :reason, updated_at = :now "
    "WHERE id = :run_id AND (status = 'paused' OR (status = 'step' AND EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = :run_id "
    "AND approvals.status = 'pending')))"
)
CANCEL_PENDING_APPROVALS = (
    "UPDATE approvals SET status = 'cancelled', reason = :reason, decided_at = :now "
    "WHERE run_id = :run_id AND status = 'pending' RETURNING id"
)
# A run that ended failed or cancelled runs none of its calls any more: an approved call
# not yet started, or one still waiting (a callback armed, a retry due), is cancelled, not
# left "approved" for ever. The
# reason goes to ``result`` (as for every cancelled approved call): ``reason`` keeps the
# approver's words.
CANCEL_UNFINISHED_APPROVALS = (
    "UPDATE approvals SET status = 'cancelled', result = :reason, "
    "decided_at = COALESCE(decided_at, :now) "
    f"WHERE run_id = :run_id AND status IN ({_UNFINISHED_APPROVALS}) RETURNING id"
)


# -- PostgreSQL: a run's start and end in one statement each (data-modifying CTEs) -------------
# RunStore.open_run and finish_run send these alone, in autocommit (Mode.WRITE_ONE), for their
# common case, and their full transaction when one changes nothing. So each changes nothing
# at all unless the whole common case holds: there is no transaction to roll back.

_AUDIT_INSERT = "INSERT INTO audit_events (at, run_id, approval_id, event, actor, detail) "


def _audit_from(source: str, run_column: str) -> str:
    """The audit row (:func:`storage.sql.events.audit_row` as ``audit_*`` parameters) of each
    row of the CTE ``source``, as a data-modifying CTE named ``audited``."""
    return (
        f"audited AS ({_AUDIT_INSERT}"
        f"SELECT CAST(:audit_at AS TIMESTAMP), {source}.{run_column}, :audit_approval_id, "
        f":audit_event, :audit_actor, CAST(:audit_detail AS JSON) FROM {source})"
    )


_RUN_VALUES = ", ".join(f":{name}" for name in RUN_COLUMNS.names)
# A new conversation's run with its ``run_started`` audit and the claim of the Slack event it
# came in (``:event_id``), all or nothing. The run is inserted only while the event is not
# claimed (as the statement's snapshot sees it), the event claimed only with the run; a claim
# another transaction commits after that snapshot makes the claim's plain INSERT (no ON
# CONFLICT) fail with unique_violation, and the whole statement with it, rather than store a
# run whose event was someone else's. Returns the new run's id (NULL when none was inserted:
# the conversation has a run, or the event was handled) and whether the event was claimed.
OPEN_NEW_RUN_WITH_EVENT = (
    f"WITH changed AS (INSERT INTO runs ({RUN_COLUMNS.sql}) SELECT {_RUN_VALUES} "
    "WHERE NOT EXISTS (SELECT 1 FROM processed_events WHERE event_id = :event_id) "
    "ON CONFLICT (conversation_key) DO NOTHING RETURNING id AS run_id), "
    "claimed AS (INSERT INTO processed_events (event_id, received_at) "
    "SELECT :event_id, :now FROM changed), "
    f"{_audit_from('changed', 'run_id')} "
    "SELECT (SELECT run_id FROM changed), "
    "EXISTS (SELECT 1 FROM processed_events WHERE event_id = :event_id)"
)


# A run's end when it is nobody's child (a child's end settles its parent: the full
# transaction's), with its ``run_<status>`` audit and its answer in the outbox
# (storage.sql.answers, from the ended row: the UPDATE changes neither its turn nor its
# progress message). ``cancel``: a failed or cancelled run's unfinished approvals too, each
# audited after the run's end in the order the UPDATE returned them, as
# ``cancel_unfinished_approvals`` does; the approvals' UPDATE reads the run's id from the
# run's, so the run's row is locked first, the order every transaction keeps (LOCK_RUN).
# Returns the run's id; no row: not the common case, or the lease is lost.
def _finish_alone(history: bool, cancel: bool) -> str:
    ended = FINISH_RUN.format(history=", history = :history" if history else "")
    ctes = [
        f"finished AS ({ended} AND (parent_run_id IS NULL OR parent_approval_id IS NULL) "
        "RETURNING id, turn, progress_ts, channel)",
        f"answered AS ({INSERT_ANSWER_OF_FINISHED})",
        # A hold asked for while it worked is dropped with its end (storage.sql.holds
        # DROP_HOLD); its row is locked after the run's, the order every transaction keeps.
        "unheld AS (DELETE FROM run_holds WHERE run_id = (SELECT id FROM finished))",
    ]
    if not cancel:
        ctes.append(_audit_from("finished", "id"))
    else:
        ctes.append(
            "cancelled AS (UPDATE approvals SET status = 'cancelled', result = :reason, "
            "decided_at = COALESCE(decided_at, :now) "
            "WHERE run_id = (SELECT id FROM finished) "
            f"AND status IN ({_UNFINISHED_APPROVALS}) RETURNING id)"
        )
        # One INSERT, its rows in order (serial ids): the run's end, then each approval's.
        ctes.append(
            f"audited AS ({_AUDIT_INSERT}"
            "SELECT CAST(:audit_at AS TIMESTAMP), run_id, approval_id, event, NULL, "
            "CAST(detail AS JSON) FROM ("
            "SELECT 0 AS n, id AS run_id, CAST(NULL AS TEXT) AS approval_id, "
            "CAST(:audit_event AS TEXT) AS event, CAST(:audit_detail AS TEXT) AS detail "
            "FROM finished UNION ALL "
            "SELECT row_number() OVER (), (SELECT id FROM finished), id, 'approval_cancelled', "
            "CAST(:cancel_detail AS TEXT) FROM cancelled) AS ended ORDER BY n)"
        )
    return f"WITH {', '.join(ctes)} SELECT id FROM finished"


# By (a history given, the approvals cancelled too).
FINISH_RUN_ALONE = {
    (history, cancel): _finish_alone(history, cancel)
    for history in (False, True)
    for cancel in (False, True)
}
