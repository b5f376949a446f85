"""Every SQL statement of the repository, and the transaction pieces several aggregates share.

Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.db import Tx, json_text
from storage.models import ANYONE, Approval
from storage.records import ACTIVE_RUN_STATUSES, FINISHED_RUN_STATUSES, DecisionOutcome, RunBusy
from storage.rows import APPROVALS, RUNS, insert_sql

_FINISHED = ", ".join(f"'{s}'" for s in FINISHED_RUN_STATUSES)
_ACTIVE = ", ".join(f"'{s}'" for s in ACTIVE_RUN_STATUSES)

RUN_BY_ID = f"SELECT {RUNS.columns} FROM runs WHERE id = :id"
RUN_BY_KEY = f"SELECT {RUNS.columns} FROM runs WHERE conversation_key = :key"
INSERT_RUN = insert_sql(RUNS, "runs", " ON CONFLICT (conversation_key) DO NOTHING")
CONTINUE_RUN = (
    "UPDATE runs SET status = 'running', requester = :requester, model_id = :model_id, "
    "history = :history, turn = :turn, answer = NULL, error = NULL, lease_owner = :lease_owner, "
    "lease_expires_at = :lease_expires_at, updated_at = :updated_at, progress_ts = NULL "
    f"WHERE id = :id AND status IN ({_FINISHED})"
)
SET_PROGRESS = "UPDATE runs SET progress_ts = :ts WHERE id = :id"
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
PAUSE_RUN = (
    "UPDATE runs SET status = 'paused', history = :history, turn = turn + 1, "
    "lease_owner = NULL, lease_expires_at = NULL, updated_at = :now "
    f"WHERE id = :id AND lease_owner = :worker AND status IN ({_ACTIVE}) "
    "RETURNING turn, requester, team_id, channel, thread_ts"
)
FINISH_RUN = (
    "UPDATE runs SET status = :status, answer = :answer, error = :error, lease_owner = NULL, "
    "lease_expires_at = NULL, updated_at = :now{history} "
    f"WHERE id = :id AND lease_owner = :worker AND status IN ({_ACTIVE})"
)
FINISH_RUN_KEEP_HISTORY = FINISH_RUN.format(history="")
FINISH_RUN_WITH_HISTORY = FINISH_RUN.format(history=", history = :history")
# A drive's lease owner is ``worker/token``; a decision's claim is already such a drive's (see
# ApprovalStore.decide), and runs while ``resuming`` until its first write. Pause and finish
# accept either active status: the lease owner, a token per drive, is what fences drives.
# Another drive of the same worker may still start the run afresh (a new token), which fences
# the claimed one off: the worker's claims are ``worker`` or ``worker/…`` (a prefix test, as
# RELEASE_LEASES).
START_RESUMED_RUN = (
    "UPDATE runs SET status = 'running', lease_owner = :owner, lease_expires_at = :lease_until, "
    "updated_at = :now WHERE id = :id AND status = 'resuming' "
    "AND (lease_owner = :worker OR substr(lease_owner, 1, :prefix_length) = :prefix) "
    f"RETURNING {RUNS.columns}"
)
STALE_RUNS = (
    f"SELECT id FROM runs WHERE status IN ({_ACTIVE}) AND lease_expires_at < :now "
    "ORDER BY updated_at LIMIT :limit"
)
TAKE_OVER_RUN = (
    "UPDATE runs SET status = 'running', lease_owner = :worker, lease_expires_at = :lease_until, "
    "updated_at = :now "
    f"WHERE id = :id AND status IN ({_ACTIVE}) AND lease_expires_at < :now "
    f"RETURNING {RUNS.columns}"
)
# PostgreSQL: taken first by every transaction that can leave a paused run with nothing pending
# (decide, expire, the sweeper's claim), so those transactions of one run take turns. Under
# READ COMMITTED, CLAIM_RESUME's NOT EXISTS alone is a write skew: two deciders each still see
# the other's approval pending and neither claims, stranding the run. Once the lock is held,
# every later statement sees what the previous holder committed. NO KEY UPDATE: it conflicts
# with itself and with UPDATEs of the run (pause, cancel, claim: they queue behind the same
# lock, run row before approvals everywhere), but not with the key-share locks that inserting
# an approval (foreign key to runs) takes. SQLite's BEGIN IMMEDIATE already serializes.
LOCK_RUN = "SELECT id FROM runs WHERE id = :run_id FOR NO KEY UPDATE"
LOCK_RUN_OF_APPROVAL = (
    "SELECT runs.id FROM runs JOIN approvals ON approvals.run_id = runs.id "
    "WHERE approvals.id = :approval_id FOR NO KEY UPDATE OF runs"
)
CLAIM_RESUME = (
    "UPDATE runs SET status = 'resuming', lease_owner = :worker, "
    "lease_expires_at = :lease_until, updated_at = :now "
    "WHERE id = :run_id AND status = 'paused' AND NOT EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = :run_id AND approvals.status = 'pending')"
)
# Paused runs that nothing will resume: no approval pending, yet no decision claimed the
# resume (a lost race before LOCK_RUN existed, or a bug). The sweeper's safety net.
STRANDED_RUNS = (
    "SELECT id FROM runs WHERE status = 'paused' AND NOT EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.status = 'pending') "
    "ORDER BY updated_at LIMIT :limit"
)
CANCEL_PAUSED_RUN = (
    "UPDATE runs SET status = 'cancelled', error = :reason, updated_at = :now "
    "WHERE id = :run_id AND status = 'paused'"
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
    "WHERE run_id = :run_id AND status IN ('pending', 'approved', 'armed', 'due') RETURNING id"
)

APPROVAL_BY_ID = f"SELECT {APPROVALS.columns} FROM approvals WHERE id = :id"
APPROVALS_FOR_TURN = (
    f"SELECT {APPROVALS.columns} FROM approvals WHERE run_id = :run_id AND turn = :turn"
)
# Whatever their status by now: one decided since the gate saw it pending must still be
# found by the resume that its decision makes possible.
RETAG_STILL_PENDING = "UPDATE approvals SET turn = :turn WHERE id = :id AND run_id = :run_id"
APPROVALS_FOR_RUN = f"SELECT {APPROVALS.columns} FROM approvals WHERE run_id = :run_id ORDER BY id"
INSERT_APPROVAL = insert_sql(APPROVALS, "approvals")
INSERT_APPROVER = (
    "INSERT INTO approval_approvers (approver, approval_id) VALUES (:approver, :approval_id)"
)
# An Approve of an approval that needs several approvers is a vote instead (storage.votes).
DECIDE = (
    "UPDATE approvals SET status = :status, decided_by = :actor, decided_at = :now, "
    "decided_by_name = :actor_name, reason = :reason "
    "WHERE id = :id AND kind = 'approval' AND status = 'pending' AND expires_at > :now "
    "AND (min_approvals <= 1 OR :status = 'denied') "
    f"RETURNING {APPROVALS.columns}"
)
EXPIRE = (
    "UPDATE approvals SET status = 'expired', decided_at = :now "
    "WHERE id = :id AND status = 'pending' AND kind != 'retry' AND expires_at <= :now "
    f"RETURNING {APPROVALS.columns}"
)
# Retries do not expire: they come due (storage.pauses).
DUE_APPROVALS = (
    "SELECT id FROM approvals WHERE status = 'pending' AND kind != 'retry' "
    "AND expires_at <= :now "
    "ORDER BY expires_at LIMIT :limit"
)
# An approved call starts only before its approval expires, and (fenced) only for the drive
# that holds its run's lease: a drive that lost it never starts a gated call.
BEGIN_EXECUTION = (
    "UPDATE approvals SET status = 'executing', executed_at = :now "
    "WHERE id = :id AND status = 'approved' AND expires_at > :now RETURNING run_id"
)
# The fenced start of a call is also its drive's first write: a run a decision's claim left
# ``resuming`` (see ApprovalStore.decide) is ``running`` from here. The run's row first, as
# every transaction takes them.
START_CLAIMED_RUN = (
    "UPDATE runs SET status = 'running' "
    "WHERE id = (SELECT run_id FROM approvals WHERE id = :id) AND lease_owner = :owner "
    "AND status = 'resuming'"
)
BEGIN_EXECUTION_FENCED = (
    "UPDATE approvals SET status = 'executing', executed_at = :now "
    "WHERE id = :id AND status = 'approved' AND expires_at > :now AND EXISTS ("
    "SELECT 1 FROM runs WHERE runs.id = approvals.run_id AND runs.lease_owner = :owner) "
    "RETURNING run_id"
)
# A drive's lease check after a gated call, in the transaction that records its result.
RENEW_LEASE_OF_APPROVAL = (
    "UPDATE runs SET lease_expires_at = :lease_until "
    "WHERE id = (SELECT run_id FROM approvals WHERE id = :id) AND lease_owner = :owner"
)
RECORD_EXECUTION = (
    "UPDATE approvals SET status = 'executed', result = :result "
    "WHERE id = :id AND status = 'executing' RETURNING run_id"
)
# The worker that ran the call finished after its run was taken over and the taker had
# recorded the outcome as unknown: the result is still the truth, and nobody re-runs it.
RECORD_LATE_EXECUTION = (
    "UPDATE approvals SET status = 'executed', result = :result "
    "WHERE id = :id AND status = 'unknown' RETURNING run_id"
)
MARK_OUTCOME_UNKNOWN = (
    "UPDATE approvals SET status = 'unknown' "
    "WHERE id = :id AND status = 'executing' RETURNING run_id"
)
CANCEL_APPROVED = (
    "UPDATE approvals SET status = 'cancelled', result = :reason "
    "WHERE id = :id AND status = 'approved' RETURNING run_id"
)
# A call that can never run (its tool is no longer configured), decided or not.
CANCEL_UNRUNNABLE = (
    "UPDATE approvals SET status = 'cancelled', result = :reason, "
    "decided_at = COALESCE(decided_at, :now) "
    "WHERE id = :id AND status IN ('pending', 'approved') RETURNING run_id"
)
SET_CARD = "UPDATE approvals SET card_channel = :channel, card_ts = :ts WHERE id = :id"
# A card someone clicked, for an approval with no card on record (its poster died after Slack
# took the card and before its ts was stored): that message becomes the card.
ADOPT_CARD = (
    "UPDATE approvals SET card_channel = :channel, card_ts = :ts WHERE id = :id AND card_ts IS NULL"
)
_NO_LIVE_CARD_CLAIM = "(card_claimed_until IS NULL OR card_claimed_until < :now)"
CLAIM_CARD = (
    "UPDATE approvals SET card_claimed_until = :until "
    f"WHERE id = :id AND status = 'pending' AND card_ts IS NULL AND {_NO_LIVE_CARD_CLAIM} "
    f"RETURNING {APPROVALS.columns}"
)
CARDS_TO_POST = (
    "SELECT id FROM approvals WHERE status = 'pending' AND card_ts IS NULL "
    f"AND created_at <= :created_before AND {_NO_LIVE_CARD_CLAIM} "
    "ORDER BY created_at LIMIT :limit"
)

INSERT_AUDIT = (
    "INSERT INTO audit_events (at, run_id, approval_id, event, actor, detail) "
    "VALUES (:at, :run_id, :approval_id, :event, :actor, :detail)"
)
CLAIM_EVENT = (
    "INSERT INTO processed_events (event_id, received_at) VALUES (:event_id, :now) "
    "ON CONFLICT (event_id) DO NOTHING"
)
FORGET_EVENTS = "DELETE FROM processed_events WHERE received_at < :cutoff"


# -- transaction pieces shared by several bodies ---------------------------------------------


def audit_row(
    now: datetime,
    event: str,
    *,
    run_id: str | None = None,
    approval_id: str | None = None,
    actor: str | None = None,
    **detail: Any,
) -> dict[str, Any]:
    return {
        "at": now,
        "run_id": run_id,
        "approval_id": approval_id,
        "event": event,
        "actor": actor,
        "detail": json_text(detail),
    }


RULE_MATCHED = "rule_matched"


def rule_matched_row(now: datetime, run_id: str, requester: str, draft: Any) -> dict[str, Any]:
    """The audit of the rule on arguments that chose an approval's policy."""
    return audit_row(
        now,
        RULE_MATCHED,
        run_id=run_id,
        approval_id=draft.id,
        actor=requester,
        tool=draft.tool_name,
        rule=draft.rule,
        when=draft.rule_when,
        approval="required",
        error=draft.rule_error,
    )


def audit(tx: Tx, now: datetime, event: str, **fields: Any) -> None:
    tx.execute(INSERT_AUDIT, audit_row(now, event, **fields))


def lock_run(tx: Tx, run_id: str) -> None:
    """Serialize this transaction with the others that may settle the run (see LOCK_RUN)."""
    if tx.dialect == "postgresql":
        tx.one(LOCK_RUN, {"run_id": run_id})


def lock_run_of_approval(tx: Tx, approval_id: str) -> None:
    """:func:`lock_run` for the run an approval belongs to, before touching the approval."""
    if tx.dialect == "postgresql":
        tx.one(LOCK_RUN_OF_APPROVAL, {"approval_id": approval_id})


def claim_resume(tx: Tx, run_id: str, worker: str, lease_until: datetime, now: datetime) -> bool:
    """``paused -> resuming`` once no approval of the run is pending; one caller wins.

    The transaction must hold the run's lock (:func:`lock_run`, or an UPDATE of the run).
    The claim is the only way out of ``paused`` towards running, so ``run_resumed`` is
    audited here, once per resume, whoever then drives the run: the claimant, or another
    worker that takes the ``resuming`` run over when the claimant never starts it.
    """
    params = {"run_id": run_id, "worker": worker, "lease_until": lease_until, "now": now}
    if tx.execute(CLAIM_RESUME, params) != 1:
        return False
    audit(tx, now, "run_resumed", run_id=run_id, worker=worker)
    return True


def cancel_paused_run(tx: Tx, run_id: str, reason: str, now: datetime) -> bool:
    """``paused -> cancelled`` with its pending approvals; the run's UPDATE comes first, so
    it takes the run's lock before the approvals' (the order every transaction keeps)."""
    params = {"run_id": run_id, "reason": reason, "now": now}
    if tx.execute(CANCEL_PAUSED_RUN, params) != 1:
        return False
    # Each approval the cancel settles is in the audit trail, as any other cancel's is.
    for (approval_id,) in tx.all(CANCEL_PENDING_APPROVALS, params):
        audit(tx, now, "approval_cancelled", run_id=run_id, approval_id=approval_id, reason=reason)
    audit(tx, now, "run_cancelled", run_id=run_id, reason=reason)
    cancel_unfinished_approvals(tx, run_id, f"the run was cancelled: {reason}", now)
    return True


def cancel_unfinished_approvals(tx: Tx, run_id: str, reason: str, now: datetime) -> list[str]:
    """Cancel (audited) the approvals a failed or cancelled run leaves approved or pending."""
    params = {"run_id": run_id, "reason": reason, "now": now}
    cancelled = [row[0] for row in tx.all(CANCEL_UNFINISHED_APPROVALS, params)]
    for approval_id in cancelled:
        audit(tx, now, "approval_cancelled", run_id=run_id, approval_id=approval_id, reason=reason)
    return cancelled


def run_busy(tx: Tx, conversation_key: str) -> RunBusy:
    row = tx.one(RUN_BY_KEY, {"key": conversation_key})
    assert row is not None
    return RunBusy(RUNS.load(tx, row))


def approver_rows(approvals: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """``approval_approvers`` rows: one per named approver, or ``*`` when anyone may decide.

    None for a wait on a system or a time (a callback, a retry): nobody decides those.
    """
    return [
        {"approver": approver, "approval_id": approval["id"]}
        for approval in approvals
        if approval.get("kind", "approval") in ("approval", "question")
        for approver in (approval["approvers"] or [ANYONE])
    ]


def decide_row(
    tx: Tx,
    approval_id: str,
    status: str,
    actor: str,
    actor_name: str | None,
    reason: str | None,
    now: datetime,
) -> Any:
    """``pending -> approved | denied`` if still pending and unexpired: the row, else None.

    One statement for every decision (a plain one, and the approve an edit makes)."""
    # The name is what people knew the decider as: it cannot be longer than its column.
    actor_name = actor_name[:255] if actor_name else None
    params = {"id": approval_id, "status": status, "actor": actor, "actor_name": actor_name}
    return tx.one(DECIDE, params | {"reason": reason, "now": now})


def decided_outcome(
    tx: Tx, approval: Approval, claim: bool, worker: str, lease_until: datetime, now: datetime
) -> DecisionOutcome:
    """A decision's outcome; one that leaves nothing of the run pending also claims its
    resume (with ``claim``) in the same transaction."""
    if not (claim and claim_resume(tx, approval.run_id, worker, lease_until, now)):
        return DecisionOutcome(approval=approval, resume_claimed=False)
    # The claim is the resume's start: the run as it stands under the claim is what
    # the resumed drive starts from (only the lease's holder changes it).
    run_row = tx.one(RUN_BY_ID, {"id": approval.run_id})
    assert run_row is not None
    return DecisionOutcome(approval=approval, resume_claimed=True, run=RUNS.load(tx, run_row))
