"""Settling a pause row: decide an approval, expire what is overdue, answer a question,
complete a callback, make a retry due.

Each settles one row through one conditional UPDATE in storage (``Repository.decide``,
``expire``, ``answer_question``, ``complete_callback``, ``make_due``), so exactly one of
several concurrent settlers wins, on any replica. When the settlement leaves nothing else of
its run waiting, the same transaction claims the run's resume; the claim is kept in
:class:`bot.engine.claims.Claims` until ``Runner.resume`` drives it. A settlement that lost
its race is refused with why (:meth:`Settlements.refuse_settled`): expired, or settled already.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import NoReturn

from bot.engine.claims import Claims
from bot.engine.leases import Leases
from bot.ops import logs
from bot.ops import metric_hooks as metrics
from bot.pauses import token_hash
from bot.policy import (
    MAX_ANSWER_LENGTH,
    AlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    StaleCopy,
    describe_status,
    ensure_may_answer,
    ensure_may_decide,
    shown_id,
)
from bot.policy.decisions import STALE_COPY
from bot.policy.quorum import already_approved, ensure_may_vote
from storage.models import Approval
from storage.repository import CallbackOutcome, ExpiryOutcome, GrantDraft, Repository


class Settlements:
    def __init__(self, repo: Repository, leases: Leases, claims: Claims) -> None:
        self.repo = repo
        self.leases = leases
        self.claims = claims

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
        read: Approval | None = None,
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
        also creates a standing grant (bot.policy.grants checks it may), in the same transaction.
        ``actor_name``: the decider's display name (handlers look it up), stored for the
        texts the model reads. ``shown``: what the clicked copy of the card showed
        (``storage.records.fingerprint``, or ``UNEDITED`` for an id-only button): an Approve
        is refused (StaleCopy) when the arguments are no longer those, checked in the
        decision's transaction. ``not_allowed_voters``: earlier quorum voters the caller
        found no longer allowed (Slack's groups, asked just now): their votes do not count.
        ``read``: the approval as the caller read it just now (a Slack click reads it to
        check where it came from), so it is not read again, for an Approve that names the copy
        it was shown: an edit since the read that changed who may decide also changed that
        copy, which the decision's statement checks (with status and expiry). A Deny, or an
        Approve without ``shown``, is judged on a read of its own.
        """
        reusable = read if approve and shown is not None else None
        approval = await self._read(approval_id, reusable)
        if approval is None:
            raise ApprovalNotFound(f"There is no approval {shown_id(approval_id)}.")
        if approval.kind != "approval":
            raise DecisionRefused(
                f"{approval_id} is not an approval but a {approval.kind}: it cannot be "
                "approved or denied.",
                approval,
            )
        ensure_may_decide(approval, actor, actor_groups)
        ensure_may_vote(approval, actor, approve=approve)
        now = self.leases.clock()
        outcome = await self.repo.decide(
            approval_id,
            actor=actor,
            approve=approve,
            reason=(reason or "").strip() or None,
            # A claim is the resume's start: its lease goes straight to the drive ``resume``
            # will run (a token of its own, so another drive of this worker is fenced off).
            worker=self.leases.new_owner(),
            lease_until=self.leases.until(now),
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
                self.claims.remember(outcome)
            return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
        await self.refuse_settled(approval_id, now)  # raises why: expired, or decided already

    async def _read(self, approval_id: str, read: Approval | None) -> Approval | None:
        """The approval as the caller just read it, else as stored now."""
        if read is not None and read.id == approval_id:
            return read
        return await self.repo.get_approval(approval_id)

    @metrics.counts_expiries
    async def expire_due(self) -> list[ExpiryOutcome]:
        """Expire every approval past its deadline (the sweeper); callers resume claimed runs."""
        outcomes = []
        for approval_id in await self.repo.due_approvals(self.leases.clock()):
            outcome = await self.repo.expire(
                approval_id,
                worker=self.leases.worker_id,
                lease_until=self.leases.until(),
                now=self.leases.clock(),
            )
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    async def answer(
        self,
        approval_id: str,
        *,
        actor: str,
        answer: str,
        actor_groups: Collection[str] = (),
        read: Approval | None = None,
    ) -> Decision:
        """Answer a question asked with ``ask_user``; exactly one concurrent answer wins.

        The same refusals as :meth:`decide`: ApprovalNotFound, NotAllowed (not one of the
        answerers), AlreadyDecided ("Already answered by @x"), ApprovalExpired. With
        choices, the answer must be one of them. ``resume_claimed``: call ``resume``.
        ``read``: as for :meth:`decide`; always used here, since a question's choices never
        change and its answerers only grow (an escalation).
        """
        approval = await self._read(approval_id, read)
        if approval is None or approval.kind != "question":
            raise ApprovalNotFound(f"There is no question {shown_id(approval_id)}.")
        ensure_may_answer(approval, actor, actor_groups)
        text = answer.strip()
        choices = approval.arguments.get("choices") or []
        if not text:
            raise DecisionRefused("An answer cannot be empty.", approval)
        if len(text) > MAX_ANSWER_LENGTH:
            raise DecisionRefused(
                f"An answer can be at most {MAX_ANSWER_LENGTH} characters long.", approval
            )
        if choices:
            # The choice as the model wrote it; its spaces do not have to be typed (refusal
            # in bot.gate.pause_rows keeps choices that differ only in spaces out).
            chosen = next((choice for choice in choices if choice.strip() == text), None)
            if chosen is None:
                raise DecisionRefused(
                    "Answer with one of the choices: " + ", ".join(choices) + ".", approval
                )
            text = chosen
        now = self.leases.clock()
        outcome = await self.repo.answer_question(
            approval_id,
            actor=actor,
            answer=text,
            worker=self.leases.worker_id,
            lease_until=self.leases.until(),
            now=now,
        )
        if outcome is not None:
            return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
        await self.refuse_settled(approval_id, now)

    async def refuse_settled(self, approval_id: str, now: datetime) -> NoReturn:
        """Raise why a pause row could not be settled: expired (and expire it now, moving its
        run on) or settled already."""
        current = await self.repo.get_approval(approval_id)
        assert current is not None
        if current.status == "pending":
            expiry = await self.repo.expire(
                approval_id, worker=self.leases.worker_id, lease_until=self.leases.until(), now=now
            )
            if expiry is None:  # the sweeper expired it first
                current = await self.repo.get_approval(approval_id) or current
            else:
                current = expiry.approval
            raise ApprovalExpired(describe_status(current), current, expiry)
        if current.status == "expired":
            raise ApprovalExpired(describe_status(current), current, None)
        raise AlreadyDecided(describe_status(current), current)

    async def complete_callback(
        self, token: str | None = None, body: str = "", *, approval_id: str | None = None
    ) -> CallbackOutcome:
        """A POST to a callback URL (by ``token``), or an operator (by ``approval_id``): the
        first completion wins and its body becomes the call's result. ``resume_claimed``:
        call ``resume``. ``gone`` (used, expired, cancelled) and ``unknown`` change nothing,
        except that a callback found past its timeout is expired now (``expiry``: move its
        run on as after any expiry).
        """
        now = self.leases.clock()
        outcome = await self.repo.complete_callback(
            token_hash=token_hash(token) if token is not None else None,
            approval_id=approval_id,
            body_text=body,
            actor="callback" if token is not None else "operator",
            worker=self.leases.worker_id,
            lease_until=self.leases.until(),
            now=now,
        )
        current = outcome.approval
        if outcome.status == "gone" and current is not None and current.status == "pending":
            outcome.expiry = await self.repo.expire(
                current.id, worker=self.leases.worker_id, lease_until=self.leases.until(), now=now
            )
        return outcome

    async def due_retries(self) -> list[str]:
        """Make every retry whose time has come due; the runs whose resume this claimed
        (callers ``resume`` each)."""
        claimed = []
        for approval_id in await self.repo.due_retries(self.leases.clock()):
            outcome = await self.repo.make_due(
                approval_id,
                worker=self.leases.worker_id,
                lease_until=self.leases.until(),
                now=self.leases.clock(),
            )
            if outcome is not None and outcome.resume_claimed:
                claimed.append(outcome.approval.run_id)
        return claimed
