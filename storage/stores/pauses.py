"""Pausing a run: its paused history and the rows it waits on, in one transaction.

Owns the ``approvals`` rows a pause creates, of every kind (an approval, a question, a callback
adopted from its armed row, a retry), with their approvers (``approval_approvers``), their
reach (``approval_reach``, :mod:`.reach`) and their audit, written with the run's ``paused``
history so that a paused run always has what it waits on. A pause whose rows were all settled
meanwhile (a callback that already came back) claims its own resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.models import Approval
from storage.records import (
    ApprovalDraft,
    LeaseLost,
    PauseOutcome,
    RunHeld,
    StorageError,
    ValueTooLong,
)
from storage.sql.approvals import (
    INSERT_APPROVAL,
    INSERT_APPROVER,
    RETAG_STILL_PENDING,
    approval_row,
    approver_rows,
)
from storage.sql.events import INSERT_AUDIT, audit_row, rule_matched_row
from storage.sql.reach import ReachPlan
from storage.sql.runs import PAUSE_RUN
from storage.sql.waits import ADOPT_CALLBACK
from storage.stores.delegations import hold_children_as_parent, insert_children
from storage.stores.reach import insert_reach
from storage.stores.rows import APPROVALS
from storage.stores.transitions import claim_resume
from storage.values import json_text, storable

WRITE = Mode.WRITE

# The audit event that records each kind of pause being asked for.
REQUESTED_EVENT = {
    "approval": "approval_requested",
    "question": "question_asked",
    "callback": "callback_awaited",
    "retry": "retry_scheduled",
    "recovery": "recovery_requested",
    "delegation": "delegation_requested",
}
# A tool call id longer than its column is refused before the transaction (ValueTooLong).
TOOL_CALL_ID_LIMIT: int = getattr(Approval.__table__.c.tool_call_id.type, "length", 0)


class PauseStore:
    database: Database

    async def save_pause(
        self,
        run_id: str,
        *,
        worker: str,
        history: list[dict[str, Any]],
        drafts: Sequence[ApprovalDraft],
        lease_until: datetime,
        now: datetime,
        still_pending: Sequence[str] = (),
        claimer: str | None = None,
        stop_if_held: bool = False,
    ) -> PauseOutcome:
        """Store the paused history and its new pending approvals in one transaction.

        A pause with no new drafts waits on approvals from an earlier turn; if those were all
        decided while the run was running, this worker claims the resume itself (as
        ``claimer``, default ``worker``: whoever then calls ``start_resumed_run``).

        ``stop_if_held``: this transaction is the safe point of the calls the drafts are for
        (nothing ran between them and it). If an operator's hold is asked for on the run,
        nothing is written and RunHeld is raised. A Stop raises RunHeld in any case: the
        run ends at this pause rather than waiting under a hold nothing releases.
        """
        history_text = json_text(history)
        for draft in drafts:
            # The model makes tool call ids up: a hostile or broken one can be any length.
            if len(draft.tool_call_id) > TOOL_CALL_ID_LIMIT:
                raise ValueTooLong(
                    "The model's tool call id", len(draft.tool_call_id), TOOL_CALL_ID_LIMIT
                )

        reach_plans = {
            d.id: ReachPlan(d.remind_at, d.escalate_at, tuple(d.escalate_to)) for d in drafts
        }

        def body(tx: Tx) -> PauseOutcome:
            params = {"id": run_id, "worker": worker, "history": history_text, "now": now}
            # First statement: its UPDATE of the run takes the run's lock (see LOCK_RUN), and
            # re-tagging an approval locks that row too, so a decision landing meanwhile
            # either waits for this pause or is seen by its claim.
            row = tx.one(PAUSE_RUN, params)
            if row is None:
                raise LeaseLost(run_id)
            turn, requester, team_id, channel, thread_ts, hold, agent = row
            # A Stop asked for since the drafted calls' safe point is taken here too: a
            # paused run under a Stop's hold was never resumed nor ended (nothing claims a
            # held run's resume), and a parent's children started under it (sub-agents).
            if hold is not None and (stop_if_held or hold == "stop"):
                raise RunHeld(run_id, str(hold))  # rolls the pause back
            if still_pending:
                # Approvals of an earlier pause that are still waiting: this pause waits on
                # them too, and the next resume must find them under this turn.
                tx.executemany(
                    RETAG_STILL_PENDING,
                    [{"turn": turn, "id": i, "run_id": run_id} for i in still_pending],
                )
            adopted = [adopt(tx, draft, turn) for draft in drafts if draft.adopt]
            rows = [
                approval_row(
                    draft,
                    run_id=run_id,
                    turn=turn,
                    requester=requester,
                    team_id=team_id,
                    channel=channel,
                    thread_ts=thread_ts,
                    now=now,
                    agent=agent,
                )
                for draft in drafts
                if not draft.adopt
            ]
            audits = [audit_row(now, "run_paused", run_id=run_id, approvals=[d.id for d in drafts])]
            audits += [
                audit_row(
                    now,
                    REQUESTED_EVENT[draft.kind],
                    run_id=run_id,
                    approval_id=draft.id,
                    actor=requester,
                    tool=draft.tool_name,
                    arguments=draft.arguments,
                    expires_at=draft.expires_at.isoformat(),
                    **({"min_approvals": draft.min_approvals} if draft.min_approvals > 1 else {}),
                )
                for draft in drafts
            ]
            audits += [rule_matched_row(now, run_id, requester, d) for d in drafts if d.rule]
            # Deferred (Tx.defer): no later statement of this pause reads them (the children's
            # runs only point at their approvals; the claim below runs when there are none),
            # so on PostgreSQL they go out together, in one statement.
            if rows:
                tx.defer(INSERT_APPROVAL, [APPROVALS.params(r) for r in rows])
                tx.defer(INSERT_APPROVER, approver_rows(rows))
                insert_reach(tx, rows, reach_plans)
            tx.defer(INSERT_AUDIT, audits)
            # Sub-agents' runs: inserted with the rows that wait for them (.delegations).
            children = insert_children(
                tx,
                run_id,
                drafts,
                requester=requester,
                team_id=team_id,
                channel=channel,
                thread_ts=thread_ts,
                lease_until=lease_until,
                now=now,
            )
            if hold is not None:  # a Pause (a Stop raised RunHeld above)
                hold_children_as_parent(tx, run_id, children)
            waiting = [APPROVALS.build(r) for r in rows] + [
                a for a in adopted if a.status == "pending"
            ]
            # A callback may have completed before this pause was stored: nothing new waits.
            claimed = not waiting and claim_resume(tx, run_id, claimer or worker, lease_until, now)
            return PauseOutcome(approvals=waiting, resume_claimed=claimed, children=children)

        def adopt(tx: Tx, draft: ApprovalDraft, turn: int) -> Approval:
            params = {
                "id": draft.id,
                "run_id": run_id,
                "turn": turn,
                "tool_call_id": draft.tool_call_id,
                "arguments": json_text(storable(draft.arguments)),
                "payload_hash": draft.payload_hash,
                "on_expiry": draft.on_expiry,
                "expires_at": draft.expires_at,
                "approvers": json_text(list(draft.approvers)),
                "reason": draft.reason,
                "now": now,
            }
            row = tx.one(ADOPT_CALLBACK, params)
            if row is None:
                raise StorageError(f"callback {draft.id} was not armed for this pause")
            return APPROVALS.load(tx, row)

        return await self.database.run(body, WRITE)
