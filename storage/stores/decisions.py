"""Decisions: ``pending -> approved | denied`` by a person, ``pending -> expired`` by the clock.

Owns those transitions of ``approvals`` (statuses and ``decided_*`` columns). Each is one
conditional UPDATE under the run's lock (:func:`~.transitions.lock_run_of_approval`), whose
row count says who won: a double click, a Slack retry or a second replica loses the race and
changes nothing. The decision that leaves nothing of its run pending also claims the run's
resume in the same transaction. An Approve of an approval that needs several approvers is a
vote (:mod:`.votes`); an approval with a grant creates it in the same transaction
(:mod:`.grants`). On PostgreSQL the common decision (one approver, no grant) and its claim
are first tried as one statement in autocommit (:mod:`storage.sql.decisions`), which changes
nothing unless it is that case; otherwise the full transaction runs, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.hashes import shows_current
from storage.limits import DATABASE_FAILURES
from storage.models import Approval, Run
from storage.records import DecisionOutcome, ExpiryOutcome, GrantDraft
from storage.sql.approvals import APPROVAL_BY_ID, DUE_APPROVALS, EXPIRE
from storage.sql.columns import APPROVAL_COLUMNS
from storage.sql.decisions import decide_and_claim_sql
from storage.sql.events import audit_row
from storage.stores.events import audit
from storage.stores.grants import insert_grant
from storage.stores.rows import APPROVALS, RUNS
from storage.stores.transitions import (
    cancel_paused_run,
    claim_resume,
    decide_row,
    decided_outcome,
    lock_run,
    lock_run_of_approval,
)
from storage.stores.votes import approve_vote, record_deny_vote

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE

# PostgreSQL's one-statement decision (storage.sql.decisions); off: always the full
# transaction (tests compare the two).
FAST_DECIDE = True


class DecisionStore:
    database: Database

    async def decide(
        self,
        approval_id: str,
        *,
        actor: str,
        approve: bool,
        reason: str | None,
        worker: str,
        lease_until: datetime,
        now: datetime,
        claim: bool = True,
        grant: GrantDraft | None = None,
        actor_name: str | None = None,
        shown: str | None = None,
        not_allowed_voters: Collection[str] = (),
    ) -> DecisionOutcome | None:
        """Record a decision if the approval is still pending and unexpired.

        Returns None when another decision, or the clock, got there first; the caller reads
        the approval again to say which. An Approve of an approval that needs several
        approvers (``min_approvals``) is a vote (:mod:`.votes`): the outcome's approval is
        still pending until the last vote needed, and ``duplicate`` when the actor had
        approved already. The decision that leaves no approval of the run
        pending also claims the resume, in the same transaction, unless ``claim`` is False
        (a decider that could not resume the run: the sweeper resumes it). The claim is the
        resume's start: ``worker`` (the lease owner of the drive that will resume it) holds
        the run's lease from this commit, and the outcome carries the run, so resuming needs
        no write of its own (``run_resumed`` is audited here). An approval with ``grant``
        also creates that standing grant (storage.stores.grants), in the same transaction.
        ``shown``: what the clicked copy showed (``records.fingerprint``, or ``UNEDITED``); an
        Approve of a pending approval whose arguments are no longer those changes nothing
        and comes back ``stale`` (None: not from a card, nothing to compare).
        ``not_allowed_voters``: earlier voters found no longer allowed; their votes are
        discarded and do not count (storage.stores.votes).
        """
        status = "approved" if approve else "denied"
        # The name is what people knew the decider as: it cannot be longer than its column.
        actor_name = actor_name[:255] if actor_name else None

        decided_audit = audit_row(
            now,
            f"approval_{status}",
            approval_id=approval_id,
            actor=actor,
            reason=reason,
            **({"actor_name": actor_name} if actor_name else {}),
        )

        if claim and grant is None and not not_allowed_voters:
            # The common decision in one round trip; when it is not that, it changed nothing
            # and the full transaction below decides.
            outcome = await self._at_once(
                approval_id, status, actor, actor_name, reason, worker, lease_until, now, shown
            )
            if outcome is not None:
                return outcome

        def body(tx: Tx) -> DecisionOutcome | None:
            lock_run_of_approval(tx, approval_id)
            if approve and shown is not None:
                # Under the run's lock: an edit cannot land between this check and the vote.
                stale = _stale_copy(tx, approval_id, shown, now)
                if stale is not None:
                    return DecisionOutcome(stale, resume_claimed=False, stale=True)
            row = decide_row(
                tx, approval_id, status, actor, actor_name, reason, now, audited=decided_audit
            )
            # PostgreSQL: the decision's audit row came with it (decide_row's ``audited``).
            audited_already = row is not None and tx.dialect == "postgresql"
            if row is None and approve:
                # An approval that needs several approvers (storage.stores.votes): a vote, and the
                # decision only when it is the last one needed.
                vote = approve_vote(
                    tx,
                    approval_id,
                    actor=actor,
                    actor_name=actor_name,
                    reason=reason,
                    now=now,
                    not_allowed=not_allowed_voters,
                )
                if vote is not None and not vote.decided:
                    pending = APPROVALS.load(tx, vote.row)
                    return DecisionOutcome(pending, resume_claimed=False, duplicate=vote.duplicate)
                row = vote.row if vote is not None else None
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            if not approve:
                record_deny_vote(tx, approval, actor=actor, reason=reason, now=now)
            if not audited_already:
                audit(
                    tx,
                    now,
                    f"approval_{status}",
                    run_id=approval.run_id,
                    approval_id=approval_id,
                    actor=actor,
                    reason=reason,
                    **({"actor_name": actor_name} if actor_name else {}),
                )
            if grant is not None and approve:
                insert_grant(tx, grant, approval, actor, now)
            return decided_outcome(tx, approval, claim, worker, lease_until, now)

        return await self.database.run(body, WRITE)

    async def _at_once(
        self,
        approval_id: str,
        status: str,
        actor: str,
        actor_name: str | None,
        reason: str | None,
        worker: str,
        lease_until: datetime,
        now: datetime,
        shown: str | None,
    ) -> DecisionOutcome | None:
        """The one-statement decision (PostgreSQL, :mod:`storage.sql.decisions`): the outcome,
        or None when it was not that case (nothing changed)."""
        if not FAST_DECIDE or self.database.dialect != "postgresql":
            return None
        statement = decide_and_claim_sql(shown if status == "approved" else None)
        if statement is None:
            return None
        decided = audit_row(
            now,
            f"approval_{status}",
            approval_id=approval_id,
            actor=actor,
            reason=reason,
            **({"actor_name": actor_name} if actor_name else {}),
        )
        resumed = audit_row(now, "run_resumed", worker=worker)
        params = {
            "id": approval_id,
            "status": status,
            "actor": actor,
            "actor_name": actor_name,
            "reason": reason,
            "now": now,
            "worker": worker,
            "lease_until": lease_until,
            "shown": shown,
            **{f"audit_{name}": value for name, value in decided.items()},
            **{f"resumed_{name}": value for name, value in resumed.items()},
        }
        width = len(APPROVAL_COLUMNS.names)

        def body(tx: Tx) -> tuple[str, bool, Approval, Run | None] | None:
            row = tx.one(statement, params)
            if row is None:
                return None
            approval_row, run_row = row[2 : 2 + width], row[2 + width :]
            run = None if run_row[0] is None else RUNS.load(tx, run_row)
            return row[0], bool(row[1]), APPROVALS.load(tx, approval_row), run

        fast = await self.database.run(body, WRITE_ONE)
        if fast is None:
            return None
        run_status, alone, approval, run = fast
        if run is not None:
            # The turn's only approval: the resume answers it as decided here, unread.
            turn_approvals = [approval] if alone else None
            return DecisionOutcome(
                approval=approval, resume_claimed=True, run=run, turn_approvals=turn_approvals
            )
        if run_status != "paused":
            return DecisionOutcome(approval=approval, resume_claimed=False)
        # Decided, not claimed, the run paused: what this statement saw pending may have
        # been decided between its snapshot and its lock, by a decision that saw this one
        # pending and did not claim either. A claim of its own, under the lock with fresh
        # statements, leaves no run stranded (it claims only if nothing is pending).
        return await self._claim_after(approval, worker, lease_until, now)

    async def _claim_after(
        self, approval: Approval, worker: str, lease_until: datetime, now: datetime
    ) -> DecisionOutcome:
        def body(tx: Tx) -> DecisionOutcome:
            lock_run(tx, approval.run_id)
            return decided_outcome(tx, approval, True, worker, lease_until, now)

        try:
            return await self.database.run(body, WRITE)
        except DATABASE_FAILURES:
            # The decision is committed: it stands. The sweeper claims a paused run with
            # nothing pending (claim_stranded_runs).
            return DecisionOutcome(approval=approval, resume_claimed=False)

    async def expire(
        self, approval_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> ExpiryOutcome | None:
        """Expire one approval past its deadline and move its run on per ``on_expiry``.

        ``deny``: the run resumes once nothing else is pending (the model is told it expired);
        ``cancel``: the run stops and its other pending approvals are cancelled.
        Returns None when the approval is not pending or not yet due.
        """

        def body(tx: Tx) -> ExpiryOutcome | None:
            lock_run_of_approval(tx, approval_id)
            row = tx.one(EXPIRE, {"id": approval_id, "now": now})
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            audit(
                tx,
                now,
                "approval_expired",
                run_id=approval.run_id,
                approval_id=approval_id,
                expires_at=approval.expires_at.isoformat(),
            )
            outcome = ExpiryOutcome(approval=approval)
            if approval.on_expiry == "cancel":
                reason = f"approval for {approval.tool_name} expired with no decision"
                outcome.run_cancelled = cancel_paused_run(tx, approval.run_id, reason, now)
            else:
                outcome.resume_claimed = claim_resume(tx, approval.run_id, worker, lease_until, now)
            return outcome

        return await self.database.run(body, WRITE)

    async def due_approvals(self, now: datetime, limit: int = 100) -> list[str]:
        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(DUE_APPROVALS, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)


def _stale_copy(tx: Tx, approval_id: str, shown: str, now: datetime) -> Approval | None:
    """The approval, when it is still open and its arguments are not what ``shown`` says the
    clicked copy showed; None otherwise (a settled one is refused as settled, as ever)."""
    row = tx.one(APPROVAL_BY_ID, {"id": approval_id})
    if row is None:
        return None
    approval = APPROVALS.load(tx, row)
    if approval.status != "pending" or approval.expires_at <= now:
        return None
    return None if shows_current(approval, shown) else approval
