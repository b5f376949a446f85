"""Batch cards: many calls of one model response decided on one card, in one transaction.

Owns no column but reads ``approvals.batch_id`` (set when the pause is stored); the
transitions are the ones every decision makes (:func:`~.transitions.decide_row`, a quorum's
:func:`~.votes.approve_vote`), one conditional UPDATE per call under the run's lock, so a
call another click or replica decided meanwhile keeps its decision and a call is decided
exactly once. The card's fingerprint of its set (``records.batch_fingerprint``) is checked in
the same transaction: a click on a card that showed another set changes nothing. The
decision that leaves nothing of the run pending claims its resume once, in the same commit.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.hashes import batch_fingerprint
from storage.models import Approval
from storage.records import BatchOutcome
from storage.sql.approvals import BATCH_ROWS
from storage.stores.events import audit
from storage.stores.rows import APPROVALS
from storage.stores.transitions import decide_row, decided_outcome, lock_run_of_approval
from storage.stores.votes import approve_vote, record_deny_vote

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


class BatchStore:
    database: Database

    async def batch_rows(self, batch_id: str) -> list[Approval]:
        """Every row of a batch (none for an approval that is not a batch's), in order."""

        def body(tx: Tx) -> list[Approval]:
            return [APPROVALS.load(tx, r) for r in tx.all(BATCH_ROWS, {"batch_id": batch_id})]

        return await self.database.run(body, READ_ONE)

    async def decide_batch(
        self,
        batch_id: str,
        *,
        actor: str,
        approve: Collection[str],
        deny: Collection[str],
        reason: str | None,
        shown: str,
        worker: str,
        lease_until: datetime,
        now: datetime,
        actor_name: str | None = None,
        claim: bool = True,
        not_allowed_voters: Collection[str] = (),
    ) -> BatchOutcome:
        """Approve the calls in ``approve`` and deny those in ``deny`` (ids of the batch), in
        one transaction, if the batch is still the set ``shown`` (its fingerprint).

        A call no longer pending (decided, expired, cancelled) is kept as it is; one that
        needs several approvers gets ``actor``'s vote (kept when they had voted already).
        """
        actor_name = actor_name[:255] if actor_name else None

        def body(tx: Tx) -> BatchOutcome:
            lock_run_of_approval(tx, batch_id)
            rows = [APPROVALS.load(tx, r) for r in tx.all(BATCH_ROWS, {"batch_id": batch_id})]
            if not rows or batch_fingerprint(rows) != shown:
                return BatchOutcome(approvals=rows, stale=True)
            outcome = BatchOutcome(approvals=[])
            last: Approval | None = None
            for row in rows:
                wanted = row.id in approve, row.id in deny
                if not any(wanted):
                    outcome.approvals.append(row)
                    continue
                approving = wanted[0]
                status = "approved" if approving else "denied"
                decided = decide_row(tx, row.id, status, actor, actor_name, reason, now)
                if decided is None and approving:
                    vote = approve_vote(
                        tx,
                        row.id,
                        actor=actor,
                        actor_name=actor_name,
                        reason=reason,
                        now=now,
                        not_allowed=not_allowed_voters,
                    )
                    if vote is not None and not vote.decided:
                        (outcome.kept if vote.duplicate else outcome.voted).append(row.id)
                        outcome.approvals.append(APPROVALS.load(tx, vote.row))
                        continue
                    decided = vote.row if vote is not None else None
                if decided is None:
                    outcome.kept.append(row.id)
                    outcome.approvals.append(row)
                    continue
                approval = APPROVALS.load(tx, decided)
                if not approving:
                    record_deny_vote(tx, approval, actor=actor, reason=reason, now=now)
                audit(
                    tx,
                    now,
                    f"approval_{status}",
                    run_id=approval.run_id,
                    approval_id=approval.id,
                    actor=actor,
                    reason=reason,
                    batch_id=batch_id,
                    **({"actor_name": actor_name} if actor_name else {}),
                )
                outcome.decided.append(row.id)
                outcome.approvals.append(approval)
                last = approval
            if last is not None:
                claimed = decided_outcome(tx, last, claim, worker, lease_until, now)
                outcome.resume_claimed, outcome.run = claimed.resume_claimed, claimed.run
            return outcome

        return await self.database.run(body, WRITE)
