"""Workflow Builder steps: starting one (its run, its approval and its row in one
transaction), and the outbox of its completion.

Owns the ``workflow_steps`` rows and the ``runs`` and ``approvals`` rows a step creates. A
step's approval is an ordinary approval (the same card, expiry, DM copies, reminders, audit),
on a run of its own whose status is ``step``: it has no agent chain, so nothing ever resumes
it; a decision, an expiry or a cancel settles the approval through the usual conditional
UPDATEs, and that settles the step. Its completion is then due (storage.sql.steps derives it
from the approval), claimed by one completer at a time, and recorded once Slack answered.
"""

from __future__ import annotations

from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.records import ApprovalDraft, StepStarted, StepToComplete
from storage.sql.approvals import (
    APPROVAL_BY_ID,
    INSERT_APPROVAL,
    INSERT_APPROVER,
    approver_rows,
)
from storage.sql.approvals import approval_row as new_approval_row
from storage.sql.reach import ReachPlan
from storage.sql.steps import (
    CLAIM_STEP,
    COMPLETE_STEP,
    END_STEP_RUN,
    INSERT_STEP,
    INSERT_STEP_RUN,
    RETRY_STEP_AT,
    STEP_BY_EXECUTION,
    STEP_OF_APPROVAL,
    STEPS_TO_COMPLETE,
)
from storage.stores.events import asked_for, audit
from storage.stores.reach import insert_reach
from storage.stores.rows import APPROVALS

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE


class StepStore:
    database: Database

    async def start_step(
        self,
        *,
        function_execution_id: str,
        workflow_execution_id: str,
        team_id: str,
        token: str,
        run_id: str,
        channel: str,
        requester: str,
        draft: ApprovalDraft,
        now: datetime,
    ) -> StepStarted:
        """Store a step's run, approval (with its approvers and reach) and row at once; a
        redelivered execution finds its row and writes nothing (``created`` False)."""

        def body(tx: Tx) -> StepStarted:
            key = f"step:{function_execution_id}"
            params = {"id": run_id, "key": key, "team_id": team_id, "requester": requester}
            if tx.execute(INSERT_STEP_RUN, params | {"now": now}) != 1:
                row = tx.one(STEP_BY_EXECUTION, {"id": function_execution_id})
                if row is None:  # the run row of another kind holds the key: never ours
                    raise ValueError(f"conversation key {key} is taken")
                return StepStarted(approval_id=row[1], run_id=row[2], created=False)
            insert_request_approval(tx, draft, run_id, team_id, channel, requester, now)
            tx.execute(
                INSERT_STEP,
                {
                    "id": function_execution_id,
                    "approval_id": draft.id,
                    "run_id": run_id,
                    "team_id": team_id,
                    "workflow_execution_id": workflow_execution_id,
                    "token": token,
                    "now": now,
                },
            )
            audit(
                tx,
                now,
                "approval_requested",
                run_id=run_id,
                approval_id=draft.id,
                actor=requester,
                **asked_for(draft),
                function_execution_id=function_execution_id,
                workflow_execution_id=workflow_execution_id,
            )
            return StepStarted(approval_id=draft.id, run_id=run_id, created=True)

        return await self.database.run(body, WRITE)

    async def step_of_approval(self, approval_id: str) -> str | None:
        """The function execution an approval belongs to; None for every other approval."""

        def body(tx: Tx) -> str | None:
            row = tx.one(STEP_OF_APPROVAL, {"id": approval_id})
            return None if row is None else str(row[0])

        return await self.database.run(body, READ_ONE)

    async def steps_to_complete(self, now: datetime, limit: int = 100) -> list[str]:
        """Steps whose approval is settled, not completed, and claimed by nobody."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(STEPS_TO_COMPLETE, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def claim_step(
        self, function_execution_id: str, *, now: datetime, until: datetime
    ) -> StepToComplete | None:
        """Claim completing the step until ``until``; None when it is not due (its approval
        pending, or completed already) or another completer's claim (or backoff) holds it."""

        def body(tx: Tx) -> StepToComplete | None:
            params = {"id": function_execution_id, "now": now, "until": until}
            row = tx.one(CLAIM_STEP, params)
            if row is None:
                return None
            approval_row_ = tx.one(APPROVAL_BY_ID, {"id": row[1]})
            assert approval_row_ is not None
            return StepToComplete(
                function_execution_id=row[0],
                run_id=row[2],
                team_id=row[3],
                token=row[4],
                attempts=int(row[5]),
                approval=APPROVALS.load(tx, approval_row_),
            )

        return await self.database.run(body, WRITE)

    async def step_completed(
        self,
        step: StepToComplete,
        *,
        completion: str,
        error: str | None,
        run_status: str,
        now: datetime,
    ) -> bool:
        """Slack answered for good (``completion``: success, error, gone or refused): the step is
        done, its token forgotten, its run ended; False if it was recorded already."""

        def body(tx: Tx) -> bool:
            params = {"id": step.function_execution_id, "now": now}
            if tx.execute(COMPLETE_STEP, params | {"completion": completion, "error": error}) != 1:
                return False
            tx.execute(END_STEP_RUN, {"run_id": step.run_id, "status": run_status, "now": now})
            audit(
                tx,
                now,
                "workflow_step_completed",
                run_id=step.run_id,
                approval_id=step.approval.id,
                function_execution_id=step.function_execution_id,
                completion=completion,
                **({"error": error} if error else {}),
            )
            return True

        return await self.database.run(body, WRITE)

    async def retry_step_at(self, function_execution_id: str, at: datetime, error: str) -> None:
        """Slack failed the completion: nobody tries it again before ``at``."""

        def body(tx: Tx) -> None:
            params = {"id": function_execution_id, "retry_at": at, "error": error[:255]}
            tx.execute(RETRY_STEP_AT, params)

        await self.database.run(body, WRITE_ONE)


def insert_request_approval(
    tx: Tx,
    draft: ApprovalDraft,
    run_id: str,
    team_id: str,
    channel: str,
    requester: str,
    now: datetime,
) -> None:
    """Store a step's (or an API request's) approval with its approvers and reach: a run of
    its own, one turn, no thread (its card starts the channel's)."""
    values = new_approval_row(
        draft,
        run_id=run_id,
        turn=1,
        requester=requester,
        team_id=team_id,
        channel=channel,
        thread_ts="",
        now=now,
    )
    tx.execute(INSERT_APPROVAL, APPROVALS.params(values))
    tx.executemany(INSERT_APPROVER, approver_rows([values]))
    plan = ReachPlan(draft.remind_at, draft.escalate_at, tuple(draft.escalate_to))
    insert_reach(tx, [values], {draft.id: plan})
