"""Waits, the pauses other than approvals: questions answered, callbacks armed and completed,
retries come due.

Owns those transitions of the ``approvals`` rows whose ``kind`` is not ``approval`` (the pause
itself stores them, :mod:`.pauses`). Every kind of pause is a row of ``approvals`` (its
``kind`` says which), so the run lock, the resume claim, expiry, the sweeper and the card
outbox are the approvals' own. Statuses:

- question: ``pending -> answered | expired | cancelled``
- callback: ``armed -> pending`` (the pause adopts it) ``-> completed | expired | cancelled``;
  ``armed -> completed`` when the other system answers before the pause is stored
- retry: ``pending -> due | cancelled``, then ``due -> executing -> executed`` when the
  resumed drive runs the call again (at most once, like an approved call)

Every transition is a conditional UPDATE taken under the run's lock, as decisions are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.errors import LeaseLost
from storage.models import Approval
from storage.records import ArmedCallback, CallbackOutcome, DecisionOutcome
from storage.sql.approvals import APPROVAL_BY_ID, INSERT_APPROVAL
from storage.sql.edits import edit_columns
from storage.sql.waits import (
    ANSWER,
    APPROVAL_BY_TOKEN,
    BEGIN_RETRY,
    CANCEL_RETRY,
    COMPLETE_BY_ID,
    COMPLETE_BY_TOKEN,
    DISARM,
    DUE_RETRIES,
    LOCK_RUN_OF_TOKEN,
    MAKE_DUE,
    PENDING_WAITS,
    RELEASE_ARMED_SLOT,
    RETRIES_OF_CALL,
    RUN_FOR_ARMING,
)
from storage.stores.events import audit
from storage.stores.rows import APPROVALS
from storage.stores.transitions import claim_resume, lock_run, lock_run_of_approval
from storage.values import storable

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


class WaitStore:
    database: Database

    async def answer_question(
        self,
        approval_id: str,
        *,
        actor: str,
        answer: str,
        worker: str,
        lease_until: datetime,
        now: datetime,
    ) -> DecisionOutcome | None:
        """Record the answer to a pending, unexpired question; the answer that leaves nothing
        pending claims the resume. None when someone answered first, or the clock did."""
        params = {"id": approval_id, "answer": answer, "actor": actor, "now": now}

        def body(tx: Tx) -> DecisionOutcome | None:
            lock_run_of_approval(tx, approval_id)
            row = tx.one(ANSWER, params)
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            audit(
                tx,
                now,
                "question_answered",
                run_id=approval.run_id,
                approval_id=approval_id,
                actor=actor,
                answer=answer[:2000],
            )
            claimed = claim_resume(tx, approval.run_id, worker, lease_until, now)
            return DecisionOutcome(approval=approval, resume_claimed=claimed)

        return await self.database.run(body, WRITE)

    def _arm_body(self, armed: ArmedCallback, owner: str, now: datetime) -> Any:
        def body(tx: Tx) -> None:
            lock_run(tx, armed.run_id)
            run = tx.one(RUN_FOR_ARMING, {"run_id": armed.run_id, "owner": owner})
            if run is None:
                raise LeaseLost(armed.run_id)
            requester, team_id, channel, thread_ts = run
            slot = {
                "run_id": armed.run_id,
                "turn": armed.turn,
                "tool_call_id": armed.tool_call_id,
                "now": now,
                "reason": "superseded: the call ran again after its worker stopped",
            }
            for old in tx.all(RELEASE_ARMED_SLOT, slot):
                audit(tx, now, "callback_cancelled", run_id=armed.run_id, approval_id=old[0])
            values = {
                "id": armed.id,
                "run_id": armed.run_id,
                "turn": armed.turn,
                "tool_call_id": armed.tool_call_id,
                "tool_name": armed.tool_name,
                "arguments": storable(armed.arguments),
                "payload_hash": "",
                "status": "armed",
                "requester": requester,
                "team_id": team_id,
                "channel": channel,
                "thread_ts": thread_ts,
                "approvers": [],
                "allow_self_approval": False,
                "on_expiry": "deny",
                "created_at": now,
                "expires_at": armed.expires_at,
                "decided_by": None,
                "decided_by_name": None,
                "decided_at": None,
                "reason": None,
                "result": None,
                "executed_at": None,
                "card_channel": None,
                "card_ts": None,
                "card_claimed_until": None,
                "kind": "callback",
                "min_approvals": 1,
                "approved_by": None,
                "token_hash": armed.token_hash,
                **edit_columns(False),
                "due_at": None,
                "rule": None,
                "rule_when": None,
                "rule_error": None,
            }
            tx.execute(INSERT_APPROVAL, APPROVALS.params(values))
            audit(tx, now, "callback_armed", run_id=armed.run_id, approval_id=armed.id)

        return body

    async def arm_callback(self, armed: ArmedCallback, *, owner: str, now: datetime) -> None:
        """Store a callback token (its hash) for a call that is running now, before the tool
        hands the URL out: a callback that arrives before the pause is stored finds it.
        Raises LeaseLost unless ``owner`` still drives the run."""
        await self.database.run(self._arm_body(armed, owner, now), WRITE)

    def arm_callback_blocking(self, armed: ArmedCallback, *, owner: str, now: datetime) -> None:
        """:meth:`arm_callback` from the event loop's own thread (an async tool called
        ``callback_url()``, which cannot await): blocks until committed."""
        self.database.run_blocking(self._arm_body(armed, owner, now), WRITE)

    async def disarm_callback(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """The tool armed a callback and then did not wait for it: the token is void."""

        def body(tx: Tx) -> bool:
            row = tx.one(DISARM, {"id": approval_id, "reason": reason, "now": now})
            if row is None:
                return False
            audit(tx, now, "callback_cancelled", run_id=row[0], approval_id=approval_id)
            return True

        return await self.database.run(body, WRITE)

    async def complete_callback(
        self,
        *,
        token_hash: str | None = None,
        approval_id: str | None = None,
        body_text: str,
        actor: str,
        worker: str,
        lease_until: datetime,
        now: datetime,
    ) -> CallbackOutcome:
        """The first completion of a waiting (or still armed) callback wins; its body becomes
        the call's result. Found by token hash (HTTP) or by id (an operator).

        ``gone``: the row exists but cannot complete (done already, expired, cancelled);
        ``repeated``: it was completed already by the same sender with this very body (a
        retry whose first answer was lost); ``unknown``: no such token or id. None of them
        changes anything. Expiry found here is
        left to the caller (:meth:`expire`), as for decisions.
        """
        if token_hash is not None:
            params: dict[str, Any] = {"token_hash": token_hash}
            statement, lookup = COMPLETE_BY_TOKEN, APPROVAL_BY_TOKEN
        else:
            params = {"id": approval_id}
            statement, lookup = COMPLETE_BY_ID, APPROVAL_BY_ID
        update = {**params, "body": body_text, "actor": actor, "now": now}

        def body(tx: Tx) -> CallbackOutcome:
            if tx.dialect == "postgresql":
                if token_hash is not None:
                    tx.one(LOCK_RUN_OF_TOKEN, {"token_hash": token_hash})
                else:
                    lock_run_of_approval(tx, str(approval_id))
            row = tx.one(statement, update)
            if row is None:
                current = tx.one(lookup, params)
                if current is None:
                    return CallbackOutcome(status="unknown")
                done = APPROVALS.load(tx, current)
                stored_body = storable(body_text)  # as the first one was stored (NUL → U+FFFD)
                if (done.status, done.decided_by, done.result) == ("completed", actor, stored_body):
                    # A retry of the body that won (its sender never heard the answer).
                    return CallbackOutcome(status="repeated", approval=done)
                return CallbackOutcome(status="gone", approval=done)
            approval = APPROVALS.load(tx, row)
            audit(
                tx,
                now,
                "callback_completed",
                run_id=approval.run_id,
                approval_id=approval.id,
                actor=actor,
                body=body_text[:2000],
            )
            claimed = claim_resume(tx, approval.run_id, worker, lease_until, now)
            return CallbackOutcome(status="completed", approval=approval, resume_claimed=claimed)

        return await self.database.run(body, WRITE)

    async def approval_by_token(self, token_hash: str) -> Approval | None:
        def body(tx: Tx) -> Approval | None:
            row = tx.one(APPROVAL_BY_TOKEN, {"token_hash": token_hash})
            return None if row is None else APPROVALS.load(tx, row)

        return await self.database.run(body, READ_ONE)

    async def due_retries(self, now: datetime, limit: int = 100) -> list[str]:
        """Retries whose time has come (the ~1 s check; a partial index holds only these)."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(DUE_RETRIES, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def make_due(
        self, approval_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> DecisionOutcome | None:
        """``pending -> due`` at its time, claiming the run's resume; None if not (any more)."""

        def body(tx: Tx) -> DecisionOutcome | None:
            lock_run_of_approval(tx, approval_id)
            row = tx.one(MAKE_DUE, {"id": approval_id, "now": now})
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            audit(tx, now, "retry_due", run_id=approval.run_id, approval_id=approval_id)
            claimed = claim_resume(tx, approval.run_id, worker, lease_until, now)
            return DecisionOutcome(approval=approval, resume_claimed=claimed)

        return await self.database.run(body, WRITE)

    async def begin_retry(self, approval_id: str, *, owner: str, now: datetime) -> bool:
        """``due -> executing`` before the call runs again; False when it must not start.

        Durable before it returns, as ``begin_execution`` is: a power cut that lost it after
        the tool ran would let a recovered bot run the retry a second time."""

        def body(tx: Tx) -> bool:
            row = tx.one(BEGIN_RETRY, {"id": approval_id, "owner": owner, "now": now})
            if row is None:
                return False
            audit(tx, now, "execution_started", run_id=row[0], approval_id=approval_id)
            hook = getattr(self, "inside_begin_execution", None)
            if hook is not None:  # the start of an execution too (tests read its durability)
                hook(tx)
            return True

        return await self.database.run(body, WRITE, durable=True)

    async def retries_of_call(self, run_id: str, *, tool_call_id: str, tool_name: str) -> int:
        """How many retries this call of the run has been given: counted from its stored
        rows, so a restart or another worker does not reset the count."""

        def body(tx: Tx) -> int:
            params = {"run_id": run_id, "tool_call_id": tool_call_id, "tool_name": tool_name}
            row = tx.one(RETRIES_OF_CALL, params)
            return int(row[0]) if row is not None else 0  # a COUNT(*) always has its row

        return await self.database.run(body, READ_ONE)

    async def cancel_retry(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """A retry that must not run (what would run changed, or its tool is gone)."""

        def body(tx: Tx) -> bool:
            row = tx.one(CANCEL_RETRY, {"id": approval_id, "reason": reason, "now": now})
            if row is None:
                return False
            audit(tx, now, "retry_cancelled", run_id=row[0], approval_id=approval_id, reason=reason)
            return True

        return await self.database.run(body, WRITE)

    async def pending_waits(self, limit: int = 100) -> list[Approval]:
        """Questions, callbacks and retries still waiting, newest first (operators)."""

        def body(tx: Tx) -> list[Approval]:
            return [APPROVALS.load(tx, row) for row in tx.all(PENDING_WAITS, {"limit": limit})]

        return await self.database.run(body, READ_ONE)
