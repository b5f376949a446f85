"""Deciding a batch card: Approve all, Deny all, or each call as a reviewer checked it.

Owns no durable state: who may decide is checked here (the batch's calls share their
approvers and quorum, bot.engine.batches), then ``Repository.decide_batch`` decides every
call still pending in one transaction under the run's lock, each through its own conditional
UPDATE (or, for a quorum, one vote each), only when the card showed the batch as it is. The
decision that leaves nothing of the run pending claims its resume once; the run then resumes
once, through the usual claim (:class:`bot.engine.claims.Claims`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from bot.engine.claims import Claims
from bot.engine.leases import Leases
from bot.policy import ApprovalNotFound, DecisionRefused, ensure_may_decide, shown_id
from bot.policy.quorum import ensure_may_vote
from storage.models import Approval
from storage.repository import BatchOutcome, DecisionOutcome, ExpiryOutcome, Repository

STALE_BATCH = (
    "This card no longer shows the calls as they are (one was changed since it was posted); "
    "nothing was decided. Look at the card again and decide from there."
)


class StaleBatch(DecisionRefused):
    """The batch card clicked showed another set of calls than the batch has now."""


@dataclass
class BatchDecision:
    """What a decision on a batch card did: every row after it, which it settled, which it
    left as they were (decided meanwhile), and whether it claimed the run's resume."""

    approvals: list[Approval]
    decided: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    voted: list[str] = field(default_factory=list)
    resume_claimed: bool = False
    # Calls found past their expiry at the click, expired now (their run moves on per
    # ``on_expiry``, as after any expiry; the caller resumes or announces it).
    expiries: list[ExpiryOutcome] = field(default_factory=list)


class BatchDecisions:
    def __init__(self, repo: Repository, leases: Leases, claims: Claims) -> None:
        self.repo = repo
        self.leases = leases
        self.claims = claims

    async def decide_batch(
        self,
        batch_id: str,
        *,
        actor: str,
        approve: Collection[str] | None = None,
        deny: Collection[str] | None = None,
        reason: str | None = None,
        shown: str,
        actor_groups: Collection[str] = (),
        actor_name: str | None = None,
        not_allowed_voters: Collection[str] = (),
    ) -> BatchDecision:
        """Approve the calls ``approve`` names and deny those ``deny`` names; None for
        either: every call of the batch (Approve all is ``approve=None, deny=()``).

        Raises ApprovalNotFound (no such batch), NotAllowed (not one of its approvers, or the
        requester of a call that needs several approvers) or StaleBatch (``shown``, the
        card's fingerprint of its set, is not the batch's now). A call already settled keeps
        its decision (``kept``)."""
        rows = await self.repo.batch_rows(batch_id)
        if not rows:
            raise ApprovalNotFound(f"There is no batch {shown_id(batch_id)}.")
        lead = next((row for row in rows if row.id == batch_id), rows[0])
        ensure_may_decide(lead, actor, actor_groups)
        ids = [row.id for row in rows]
        approving = set(ids if approve is None else approve) & set(ids)
        denying = (set(ids if deny is None else deny) & set(ids)) - approving
        if approving:
            ensure_may_vote(lead, actor, approve=True)
        outcome: BatchOutcome = await self.repo.decide_batch(
            batch_id,
            actor=actor,
            approve=approving,
            deny=denying,
            reason=(reason or "").strip() or None,
            shown=shown,
            worker=self.leases.new_owner(),
            lease_until=self.leases.until(),
            now=self.leases.clock(),
            actor_name=actor_name,
            not_allowed_voters=not_allowed_voters,
        )
        if outcome.stale:
            raise StaleBatch(STALE_BATCH, lead)
        if outcome.resume_claimed:
            claimed = next(a for a in outcome.approvals if a.id in outcome.decided)
            self.claims.remember(
                DecisionOutcome(approval=claimed, resume_claimed=True, run=outcome.run)
            )
        now = self.leases.clock()
        expiries = []
        for approval in outcome.approvals:
            # Expiry found at the click moves the run on now, not at the next sweep.
            overdue = approval.status == "pending" and approval.expires_at <= now
            if approval.id in outcome.kept and overdue:
                expiry = await self.repo.expire(
                    approval.id,
                    worker=self.leases.worker_id,
                    lease_until=self.leases.until(),
                    now=now,
                )
                if expiry is not None:
                    expiries.append(expiry)
        return BatchDecision(
            approvals=outcome.approvals,
            decided=outcome.decided,
            kept=outcome.kept,
            voted=outcome.voted,
            resume_claimed=outcome.resume_claimed,
            expiries=expiries,
        )
