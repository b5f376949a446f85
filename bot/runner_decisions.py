"""The runner's decisions: approve or deny an approval, and expire those past their deadline.

Each settles a row through one conditional UPDATE in storage (``Repository.decide`` and
``expire``) and, when nothing else of the run waits, claims its resume; the claim is kept
(``_claimed``, memory only as a shortcut) until ``Runner.resume`` drives it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import TYPE_CHECKING, NoReturn

from bot import logs
from bot import metric_hooks as metrics
from bot.decisions import (
    STALE_COPY,
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    StaleCopy,
    ensure_may_decide,
)
from bot.quorum import already_approved, ensure_may_vote
from storage.repository import DecisionOutcome, ExpiryOutcome, GrantDraft, Repository

# Claimed resumes a runner keeps for ``resume`` (each is one run, as its claim read it): past
# this, the oldest are dropped, and resuming those starts them from the database.
CLAIMS_KEPT = 1000


class DecisionSettling:
    """Mixed into :class:`bot.runner.Runner`: ``decide`` and ``expire_due``."""

    repo: Repository
    worker_id: str
    clock: Callable[[], datetime]
    _claimed: dict[str, DecisionOutcome]

    def _lease_until(self) -> datetime:
        raise NotImplementedError

    def _new_owner(self) -> str:
        raise NotImplementedError

    if TYPE_CHECKING:  # bot.runner_waits.PauseSettling's, which Runner also mixes in

        async def _refuse_settled(self, approval_id: str, now: datetime) -> NoReturn: ...

    @metrics.counts_decisions
    @logs.bound_to("approval_id")
    async def decide(
        self,
        approval_id: str,
        *,
        actor: str,
        approve: bool,
        reason: str | None = None,
        actor_groups: Collection[str] = (),
        claim_resume: bool = True,
        grant: GrantDraft | None = None,
        actor_name: str | None = None,
        shown: str | None = None,
        not_allowed_voters: Collection[str] = (),
    ) -> Decision:
        """Approve or deny; exactly one concurrent decision wins.

        Raises a DecisionRefused subclass when the approval does not exist, the actor may not
        decide it, it already has a decision or it has expired (judged by the clock now, not
        by the sweeper), or (quorum) the actor had approved it already. An Approve of an
        approval that needs several approvers returns it still pending until the last one.
        When the decision leaves nothing pending in the run, the returned
        Decision has ``resume_claimed`` and the caller must call ``resume``; with
        ``claim_resume`` False it never does: the run stays paused with nothing pending and
        a bot's sweeper resumes it (``claim_stranded_runs``). ``grant``: an approval that
        also creates a standing grant (bot.grants checks it may), in the same transaction.
        ``actor_name``: the decider's display name (handlers look it up), stored for the
        texts the model reads. ``shown``: what the clicked copy of the card showed
        (``storage.records.fingerprint``, or ``UNEDITED`` for an id-only button): an Approve
        is refused (StaleCopy) when the arguments are no longer those, checked in the
        decision's transaction. ``not_allowed_voters``: earlier quorum voters the caller
        found no longer allowed (Slack's groups, asked just now): their votes do not count.
        """
        approval = await self.repo.get_approval(approval_id)
        if approval is None:
            raise ApprovalNotFound(f"There is no approval {approval_id}.")
        if approval.kind != "approval":
            raise DecisionRefused(
                f"{approval_id} is not an approval but a {approval.kind}: it cannot be "
                "approved or denied.",
                approval,
            )
        ensure_may_decide(approval, actor, actor_groups)
        ensure_may_vote(approval, actor, approve=approve)
        now = self.clock()
        outcome = await self.repo.decide(
            approval_id,
            actor=actor,
            approve=approve,
            reason=(reason or "").strip() or None,
            # A claim is the resume's start: its lease goes straight to the drive ``resume``
            # will run (a token of its own, so another drive of this worker is fenced off).
            worker=self._new_owner(),
            lease_until=self._lease_until(),
            now=now,
            claim=claim_resume,
            grant=grant,
            actor_name=actor_name,
            shown=shown,
            not_allowed_voters=not_allowed_voters,
        )
        if outcome is not None and outcome.stale:
            raise StaleCopy(STALE_COPY, outcome.approval)
        if outcome is not None and outcome.duplicate:
            raise already_approved(outcome.approval)
        if outcome is not None:
            if outcome.resume_claimed:
                self._remember_claim(outcome)
            return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
        await self._refuse_settled(approval_id, now)  # raises why: expired, or decided already

    def _remember_claim(self, outcome: DecisionOutcome) -> None:
        """Keep a claimed resume for ``resume``; a caller that never resumes it (it crashed,
        or gave up) leaves the run to the sweeper once the claim's lease runs out."""
        while len(self._claimed) >= CLAIMS_KEPT:
            self._claimed.pop(next(iter(self._claimed)))
        self._claimed[outcome.approval.run_id] = outcome

    @metrics.counts_expiries
    async def expire_due(self) -> list[ExpiryOutcome]:
        """Expire every approval past its deadline (the sweeper); callers resume claimed runs."""
        outcomes = []
        for approval_id in await self.repo.due_approvals(self.clock()):
            outcome = await self.repo.expire(
                approval_id,
                worker=self.worker_id,
                lease_until=self._lease_until(),
                now=self.clock(),
            )
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes
