"""The runner's side of the other pauses: answering questions, completing callbacks, and the
check that makes retries due. Each settles a row through one conditional UPDATE and, when
nothing else of the run waits, claims its resume, exactly as a decision does."""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import NoReturn

from bot.decisions import (
    AlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    describe_status,
    ensure_may_answer,
)
from bot.pauses import token_hash
from storage.repository import CallbackOutcome, Repository

# What one answer to ask_user may hold (Slack's plain-text input allows 3000).
MAX_ANSWER_LENGTH = 3000


class PauseSettling:
    """Mixed into :class:`bot.runner.Runner`."""

    repo: Repository
    worker_id: str
    clock: Callable[[], datetime]

    def _lease_until(self) -> datetime:
        raise NotImplementedError

    async def answer(
        self,
        approval_id: str,
        *,
        actor: str,
        answer: str,
        actor_groups: Collection[str] = (),
    ) -> Decision:
        """Answer a question asked with ``ask_user``; exactly one concurrent answer wins.

        The same refusals as :meth:`decide`: ApprovalNotFound, NotAllowed (not one of the
        answerers), AlreadyDecided ("Already answered by @x"), ApprovalExpired. With
        choices, the answer must be one of them. ``resume_claimed``: call ``resume``.
        """
        approval = await self.repo.get_approval(approval_id)
        if approval is None or approval.kind != "question":
            raise ApprovalNotFound(f"There is no question {approval_id}.")
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
            # in bot.pause_rows keeps choices that differ only in spaces out).
            chosen = next((choice for choice in choices if choice.strip() == text), None)
            if chosen is None:
                raise DecisionRefused(
                    "Answer with one of the choices: " + ", ".join(choices) + ".", approval
                )
            text = chosen
        now = self.clock()
        outcome = await self.repo.answer_question(
            approval_id,
            actor=actor,
            answer=text,
            worker=self.worker_id,
            lease_until=self._lease_until(),
            now=now,
        )
        if outcome is not None:
            return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
        await self._refuse_settled(approval_id, now)

    async def _refuse_settled(self, approval_id: str, now: datetime) -> NoReturn:
        """Raise why a pause row could not be settled: expired (and expire it now, moving its
        run on) or settled already."""
        current = await self.repo.get_approval(approval_id)
        assert current is not None
        if current.status == "pending":
            expiry = await self.repo.expire(
                approval_id, worker=self.worker_id, lease_until=self._lease_until(), now=now
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
        now = self.clock()
        outcome = await self.repo.complete_callback(
            token_hash=token_hash(token) if token is not None else None,
            approval_id=approval_id,
            body_text=body,
            actor="callback" if token is not None else "operator",
            worker=self.worker_id,
            lease_until=self._lease_until(),
            now=now,
        )
        current = outcome.approval
        if outcome.status == "gone" and current is not None and current.status == "pending":
            outcome.expiry = await self.repo.expire(
                current.id, worker=self.worker_id, lease_until=self._lease_until(), now=now
            )
        return outcome

    async def due_retries(self) -> list[str]:
        """Make every retry whose time has come due; the runs whose resume this claimed
        (callers ``resume`` each)."""
        claimed = []
        for approval_id in await self.repo.due_retries(self.clock()):
            outcome = await self.repo.make_due(
                approval_id,
                worker=self.worker_id,
                lease_until=self._lease_until(),
                now=self.clock(),
            )
            if outcome is not None and outcome.resume_claimed:
                claimed.append(outcome.approval.run_id)
        return claimed
