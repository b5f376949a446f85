"""Quorum: the votes on approvals that need several distinct approvers (``approval_votes``).

An approval with ``min_approvals`` N > 1 is approved by the N-th distinct person's Approve,
in the transaction that records that vote, which then claims the run's resume exactly as a
single approval's decision does (``DecisionStore.decide``). Each Approve before it is only a
vote: recorded (one per person: the primary key), audited, and listed on the approval's
``approved_by`` so cards and lists show the progress. The requester's vote never counts. A
Deny ends the approval as it always did; its vote replaces the person's earlier one.

Counting is done after locking the approval's row (PostgreSQL ``FOR NO KEY UPDATE``, after
the run's lock that every deciding transaction takes first; SQLite has one writer), so two
simultaneous 2nd votes take turns: the second sees the first's vote and approves, never both
and never neither.

Only votes of people still allowed count: a voter since removed from an approver user group
is named in ``not_allowed`` by the caller (handlers look the groups up in Slack before the
transaction, never inside it); the transaction drops those votes by voter id, audits each as
``approval_vote_discarded``, and counts the rest it sees.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.models import Approval
from storage.sql.votes import (
    APPROVE_VOTERS,
    COUNTED_VOTERS,
    DECIDE_BY_QUORUM,
    DISCARD_VOTE,
    INSERT_APPROVE_VOTE,
    LOCK_PENDING_APPROVAL,
    MARK_CARD_EDIT_DUE,
    PENDING_APPROVAL,
    RECORD_DENY_VOTE,
    SET_APPROVED_BY,
)
from storage.stores.events import audit
from storage.stores.rows import APPROVALS
from storage.values import json_text


@dataclass
class Vote:
    """What an Approve of an approval that needs several did.

    ``row``: the approval's row after it (approved when ``decided``); ``duplicate``: the
    person had approved already and nothing changed.
    """

    row: Any
    decided: bool = False
    duplicate: bool = False


def approve_vote(
    tx: Tx,
    approval_id: str,
    *,
    actor: str,
    reason: str | None,
    now: datetime,
    actor_name: str | None = None,
    not_allowed: Collection[str] = (),
) -> Vote | None:
    """Record ``actor``'s Approve of a pending approval that needs several approvers.

    None when the approval is not pending (decided, expired, another kind): the caller says
    why. The transaction must hold the run's lock (``lock_run_of_approval``). ``not_allowed``:
    earlier voters no longer allowed to approve (checked by the caller just before): their
    votes are discarded here, so neither this count nor the card includes them.
    """
    params: dict[str, Any] = {"id": approval_id, "now": now}
    lock = LOCK_PENDING_APPROVAL if tx.dialect == "postgresql" else PENDING_APPROVAL
    row = tx.one(lock, params)
    if row is None:
        return None
    approval: Approval = APPROVALS.load(tx, row)
    if tx.execute(INSERT_APPROVE_VOTE, {**params, "voter": actor, "reason": reason}) != 1:
        return Vote(row=row, duplicate=True)
    voters = []
    for (voter,) in tx.all(COUNTED_VOTERS, {"id": approval_id, "requester": approval.requester}):
        if voter == actor or voter not in not_allowed:
            voters.append(voter)
            continue
        tx.execute(DISCARD_VOTE, {"id": approval_id, "voter": voter})
        audit(
            tx,
            now,
            "approval_vote_discarded",
            run_id=approval.run_id,
            approval_id=approval_id,
            actor=voter,
            reason="no longer an approver",
            discarded_at_vote_of=actor,
        )
    audit(
        tx,
        now,
        "approval_vote",
        run_id=approval.run_id,
        approval_id=approval_id,
        actor=actor,
        vote="approve",
        approvals=len(voters),
        needed=approval.min_approvals,
    )
    tx.execute(MARK_CARD_EDIT_DUE, params)
    values = {**params, "approved_by": json_text(voters)}
    if len(voters) < approval.min_approvals:
        return Vote(row=tx.one(SET_APPROVED_BY, values))
    decided = tx.one(
        DECIDE_BY_QUORUM,
        {**values, "actor": actor, "actor_name": actor_name, "reason": reason},
    )
    return Vote(row=decided, decided=True)


def record_deny_vote(
    tx: Tx, approval: Approval, *, actor: str, reason: str | None, now: datetime
) -> None:
    """A Deny that ended an approval needing several approvers, kept among its votes."""
    if approval.min_approvals > 1:
        params = {"id": approval.id, "voter": actor, "now": now, "reason": reason}
        tx.execute(RECORD_DENY_VOTE, params)


class VoteStore:
    database: Database

    async def approve_voters(self, approval_id: str) -> list[str]:
        """Who has an Approve vote on an approval that needs several approvers, oldest first."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(APPROVE_VOTERS, {"id": approval_id})]

        return await self.database.run(body, Mode.READ_ONE)
