"""The steps several stores take inside their own transactions: the run's lock, the resume
claim, cancelling a paused run, a decision's row and outcome, and a child run's end settling
its parent's ``delegation`` row.

Owns no table of its own; these are the transitions of ``runs`` and ``approvals`` that more
than one aggregate makes (a decision, an expiry, an answer, a callback, an uninstall), written
once so that every caller takes the run's lock first and claims a resume the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Tx
from storage.errors import RunBusy
from storage.models import Approval
from storage.records import DecisionOutcome
from storage.sql.approvals import DECIDE
from storage.sql.delegations import PARENT_OF_RUN, SETTLE_DELEGATION
from storage.sql.events import audit_row, audited_params, audited_postgres
from storage.sql.runs import (
    CANCEL_PAUSED_RUN,
    CANCEL_PENDING_APPROVALS,
    CANCEL_UNFINISHED_APPROVALS,
    CLAIM_RESUME,
    CLAIM_RESUME_AUDITED,
    CLAIM_RESUME_RETURNING,
    CLAIM_RESUME_RETURNING_AUDITED,
    LOCK_RUN,
    LOCK_RUN_OF_APPROVAL,
    RUN_BY_KEY,
)
from storage.stores.answers import store_answer
from storage.stores.events import audit
from storage.stores.rows import RUNS


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
    if tx.dialect == "postgresql":  # with its audit row, in one round trip
        resumed = audit_row(now, "run_resumed", run_id=run_id, worker=worker)
        return tx.one(CLAIM_RESUME_AUDITED, audited_params(params, resumed)) is not None
    if tx.execute(CLAIM_RESUME, params) != 1:
        return False
    audit(tx, now, "run_resumed", run_id=run_id, worker=worker)
    return True


def claim_resume_row(tx: Tx, run_id: str, worker: str, lease_until: datetime, now: datetime) -> Any:
    """:func:`claim_resume`, giving back the claimed run's row (``RUN_COLUMNS``) or None: a
    round trip fewer than claiming and then reading it."""
    params = {"run_id": run_id, "worker": worker, "lease_until": lease_until, "now": now}
    if tx.dialect == "postgresql":  # with its audit row, in one round trip
        resumed = audit_row(now, "run_resumed", run_id=run_id, worker=worker)
        return tx.one(CLAIM_RESUME_RETURNING_AUDITED, audited_params(params, resumed))
    row = tx.one(CLAIM_RESUME_RETURNING, params)
    if row is not None:
        audit(tx, now, "run_resumed", run_id=run_id, worker=worker)
    return row


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
    store_answer(tx, run_id, "cancelled", reason, now)  # "Stopped: …" in its thread
    cancel_unfinished_approvals(tx, run_id, f"the run was cancelled: {reason}", now)
    # A child's end is its parent's result; the sweeper claims the parent's resume.
    settle_parent(tx, run_id, "cancelled", answer=None, error=reason, now=now)
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


# PostgreSQL: a decision and its audit row in one statement (decide_row's ``audited``).
DECIDE_AUDITED = audited_postgres(DECIDE)


def decide_row(
    tx: Tx,
    approval_id: str,
    status: str,
    actor: str,
    actor_name: str | None,
    reason: str | None,
    now: datetime,
    audited: dict[str, Any] | None = None,
) -> Any:
    """``pending -> approved | denied`` if still pending and unexpired: the row, else None.

    One statement for every decision (a plain one, and the approve an edit makes).
    ``audited``: on PostgreSQL, this audit row (:func:`audit_row`; its run id is the
    decided row's) is written by the same statement when it decides (audited_postgres);
    the caller audits only when ``tx.dialect`` is not PostgreSQL."""
    # The name is what people knew the decider as: it cannot be longer than its column.
    actor_name = actor_name[:255] if actor_name else None
    params: dict[str, Any] = {
        "id": approval_id,
        "status": status,
        "actor": actor,
        "actor_name": actor_name,
    }
    params |= {"reason": reason, "now": now}
    if audited is not None and tx.dialect == "postgresql":
        return tx.one(DECIDE_AUDITED, audited_params(params, audited))
    return tx.one(DECIDE, params)


def decided_outcome(
    tx: Tx, approval: Approval, claim: bool, worker: str, lease_until: datetime, now: datetime
) -> DecisionOutcome:
    """A decision's outcome; one that leaves nothing of the run pending also claims its
    resume (with ``claim``) in the same transaction."""
    # The claim is the resume's start: the run as it stands under the claim is what
    # the resumed drive starts from (only the lease's holder changes it).
    run_row = claim_resume_row(tx, approval.run_id, worker, lease_until, now) if claim else None
    if run_row is None:
        return DecisionOutcome(approval=approval, resume_claimed=False)
    return DecisionOutcome(approval=approval, resume_claimed=True, run=RUNS.load(tx, run_row))


# -- sub-agents (storage.stores.delegations) ----------------------------------------------

RESULT_LIMIT = 20_000


def child_result(status: str, answer: str | None, error: str | None) -> str:
    """What the parent's ``delegate`` call returns: the child's final answer, or
    "failed: …", or "stopped by @x" (a Stop), or "cancelled: …"."""
    if status == "completed":
        text = answer or ""
    elif status == "failed":
        text = f"failed: {error or 'the sub-agent failed'}"
    elif error and error.lower().startswith("stopped by "):
        who = error[len("stopped by ") :]
        text = f"stopped by @{who}"
    elif error and error.lower() == "stopped":
        text = "stopped by an operator"
    else:
        text = f"cancelled: {error or 'the sub-agent was cancelled'}"
    return text[:RESULT_LIMIT]


def settle_parent(
    tx: Tx,
    run_id: str,
    status: str,
    *,
    answer: str | None,
    error: str | None,
    now: datetime,
    claimer: str | None = None,
    lease_until: datetime | None = None,
    link: Sequence[Any] | None = None,
) -> str | None:
    """A run ended (``status``): if it is a child, settle its parent's ``delegation`` row with
    its result; with ``claimer``, also claim the parent's resume when nothing else of it
    waits. The parent's id when this claimed its resume, else None. ``link``: the run's
    ``parent_run_id, parent_approval_id`` when the caller's own statement returned them
    (they never change), so they are not read again."""
    if link is None:
        link = tx.one(PARENT_OF_RUN, {"id": run_id})
    if link is None or link[0] is None or link[1] is None:
        return None
    parent_run_id, parent_approval_id = str(link[0]), str(link[1])
    lock_run(tx, parent_run_id)  # the parent's lock before its row (the order all keep)
    result = child_result(status, answer, error)
    params = {"id": parent_approval_id, "result": result, "outcome": status, "now": now}
    if tx.one(SETTLE_DELEGATION, params) is None:
        return None  # the parent moved on (cancelled): nothing waits for this result
    audit(
        tx,
        now,
        "delegation_settled",
        run_id=parent_run_id,
        approval_id=parent_approval_id,
        child_run_id=run_id,
        outcome=status,
    )
    if claimer is None or lease_until is None:
        return None  # the sweeper claims it (a paused run with nothing pending)
    if claim_resume(tx, parent_run_id, claimer, lease_until, now):
        return parent_run_id
    return None
