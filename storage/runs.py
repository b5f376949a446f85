"""Runs: start or continue a conversation, pause, finish, leases, take-over, cancel."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from storage.db import Database, Mode, Tx, json_text
from storage.edits import edit_columns
from storage.limits import DATABASE_FAILURES
from storage.models import Approval, Run
from storage.pauses import ADOPT_CALLBACK
from storage.reach import ReachPlan, insert_reach
from storage.records import (
    FINISHED_RUN_STATUSES,
    ApprovalDraft,
    DuplicateEvent,
    LeaseLost,
    PauseOutcome,
    RunBusy,
    StorageError,
    ValueTooLong,
)
from storage.rows import APPROVALS, RUNS
from storage.statements import (
    APPROVALS_FOR_TURN,
    CLAIM_EVENT,
    CLEAR_PROGRESS,
    CONTINUE_RUN,
    FINISH_RUN_KEEP_HISTORY,
    FINISH_RUN_WITH_HISTORY,
    INSERT_APPROVAL,
    INSERT_APPROVER,
    INSERT_AUDIT,
    INSERT_RUN,
    PAUSE_RUN,
    RELEASE_LEASES,
    RENEW_LEASE,
    RETAG_STILL_PENDING,
    RUN_BY_ID,
    RUN_BY_KEY,
    SET_PROGRESS,
    STALE_RUNS,
    START_RESUMED_RUN,
    STRANDED_RUNS,
    TAKE_OVER_RUN,
    approver_rows,
    audit,
    audit_row,
    cancel_paused_run,
    cancel_unfinished_approvals,
    claim_resume,
    lock_run,
    rule_matched_row,
    run_busy,
)
from storage.values import storable

log = logging.getLogger(__name__)

WRITE, READ, READ_ONE = Mode.WRITE, Mode.READ, Mode.READ_ONE

# (history, run status, run error, approvals of the run's last turn) -> history in which
# every tool call has a result. Given by the engine: storage does not read llm messages.
SettleHistory = Callable[
    [list[dict[str, Any]], str, str | None, list[Approval]], list[dict[str, Any]]
]

# The audit event that records each kind of pause being asked for.
REQUESTED_EVENT = {
    "approval": "approval_requested",
    "question": "question_asked",
    "callback": "callback_awaited",
    "retry": "retry_scheduled",
}

TOOL_CALL_ID_LIMIT: int = Approval.__table__.c.tool_call_id.type.length


class RunStore:
    database: Database

    # -- runs --------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        def body(tx: Tx) -> Run | None:
            row = tx.one(RUN_BY_ID, {"id": run_id})
            return None if row is None else RUNS.load(tx, row)

        return await self.database.run(body, READ_ONE)

    async def open_run(
        self,
        *,
        run_id: str,
        conversation_key: str,
        requester: str,
        model_id: str,
        new_messages: list[dict[str, Any]],
        worker: str,
        lease_until: datetime,
        now: datetime,
        opening_messages: Sequence[dict[str, Any]] = (),
        team_id: str = "",
        channel: str = "",
        thread_ts: str = "",
        settle_history: SettleHistory | None = None,
        event_id: str | None = None,
    ) -> Run:
        """Start a run for a conversation, or continue its finished run with new messages.

        ``opening_messages`` (the system prompt) begin a new conversation's history only.
        ``settle_history`` closes the tool calls a failed or cancelled run left without a
        result (providers reject such a history), in the same transaction.

        The new user message is stored before any model call, so a crash mid-turn loses
        nothing: whoever takes the run over replays the turn from the stored history.
        Raises RunBusy when the conversation's run is working or waiting for approvals.

        ``event_id`` (the Slack event the request came in) is recorded as handled in the
        same transaction, so an event counts as processed exactly when its request is stored:
        a redelivery raises DuplicateEvent and stores nothing. A busy conversation still
        records the event (then RunBusy is raised), so a retry is not answered twice.
        """

        def body(tx: Tx) -> Run | RunBusy:
            if (
                event_id is not None
                and tx.execute(CLAIM_EVENT, {"event_id": event_id, "now": now}) != 1
            ):
                raise DuplicateEvent(event_id)
            try:
                return open_in(tx)
            except RunBusy as busy:
                if event_id is None:
                    raise
                return busy  # commit the event; the caller hears RunBusy

        def open_in(tx: Tx) -> Run:
            row = tx.one(RUN_BY_KEY, {"key": conversation_key})
            if row is None:
                values: dict[str, Any] = {
                    "id": run_id,
                    "conversation_key": conversation_key,
                    "team_id": team_id,
                    "channel": channel,
                    "thread_ts": thread_ts,
                    "requester": requester,
                    "status": "running",
                    "model_id": model_id,
                    "history": storable([*opening_messages, *new_messages]),
                    "turn": 0,
                    "answer": None,
                    "error": None,
                    "lease_owner": worker,
                    "lease_expires_at": lease_until,
                    "created_at": now,
                    "updated_at": now,
                    "progress_ts": None,
                }
                if tx.execute(INSERT_RUN, RUNS.params(values)) != 1:
                    raise run_busy(tx, conversation_key)  # another replica just started it
                audit(tx, now, "run_started", run_id=run_id, actor=requester, event_id=event_id)
                return RUNS.build(values)
            values = RUNS.values(tx, row)
            if values["status"] not in FINISHED_RUN_STATUSES:
                raise RunBusy(RUNS.build(values))
            history = values["history"]
            if settle_history is not None and values["status"] in ("failed", "cancelled"):
                params = {"run_id": values["id"], "turn": values["turn"]}
                approvals = [APPROVALS.load(tx, r) for r in tx.all(APPROVALS_FOR_TURN, params)]
                settled = settle_history(history, values["status"], values["error"], approvals)
                history = storable(settled)
            values.update(
                status="running",
                requester=requester,
                model_id=model_id,
                history=[*history, *storable(new_messages)],
                # A new request is a new turn: approvals of earlier turns never answer its
                # calls, even when a provider reuses tool call ids like "call_0".
                turn=values["turn"] + 1,
                answer=None,
                error=None,
                lease_owner=worker,
                lease_expires_at=lease_until,
                updated_at=now,
                progress_ts=None,
            )
            if tx.execute(CONTINUE_RUN, RUNS.params(values)) != 1:
                raise run_busy(tx, conversation_key)  # another replica continued it first
            audit(tx, now, "run_continued", run_id=values["id"], actor=requester, event_id=event_id)
            return RUNS.build(values)

        opened = await self.database.run(body, WRITE)
        if isinstance(opened, RunBusy):
            raise opened
        return opened

    async def renew_lease(self, run_id: str, worker: str, lease_until: datetime) -> None:
        def body(tx: Tx) -> None:
            params = {"id": run_id, "worker": worker, "lease_until": lease_until}
            if tx.execute(RENEW_LEASE, params) != 1:
                raise LeaseLost(run_id)

        await self.database.run(body, WRITE)

    async def release_leases(self, worker: str, *, now: datetime) -> list[str]:
        """End every lease ``worker`` holds (a graceful shutdown); the runs it released.

        ``worker`` is the runner's worker id: its resume claims carry it as is, its drives as
        ``worker/token``. Call it only once the worker has stopped driving runs: a drive still
        going would renew the lease it lost (or find it taken over).
        """
        prefix = f"{worker}/"
        params = {"worker": worker, "prefix": prefix, "prefix_length": len(prefix), "now": now}

        def body(tx: Tx) -> list[str]:
            released = [row[0] for row in tx.all(RELEASE_LEASES, params)]
            for run_id in released:
                audit(tx, now, "lease_released", run_id=run_id, worker=worker)
            return released

        return await self.database.run(body, WRITE)

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
    ) -> PauseOutcome:
        """Store the paused history and its new pending approvals in one transaction.

        A pause with no new drafts waits on approvals from an earlier turn; if those were all
        decided while the run was running, this worker claims the resume itself (as
        ``claimer``, default ``worker``: whoever then calls ``start_resumed_run``).
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
            turn, requester, team_id, channel, thread_ts = row
            if still_pending:
                # Approvals of an earlier pause that are still waiting: this pause waits on
                # them too, and the next resume must find them under this turn.
                tx.executemany(
                    RETAG_STILL_PENDING,
                    [{"turn": turn, "id": i, "run_id": run_id} for i in still_pending],
                )
            adopted = [adopt(tx, draft, turn) for draft in drafts if draft.adopt]
            rows = [
                {
                    "id": draft.id,
                    "run_id": run_id,
                    "turn": turn,
                    "tool_call_id": draft.tool_call_id,
                    "tool_name": draft.tool_name,
                    "arguments": storable(draft.arguments),
                    "payload_hash": draft.payload_hash,
                    "status": "pending",
                    "requester": requester,
                    "team_id": team_id,
                    "channel": channel,
                    "thread_ts": thread_ts,
                    "approvers": list(draft.approvers),
                    "allow_self_approval": draft.allow_self_approval,
                    "on_expiry": draft.on_expiry,
                    "created_at": now,
                    "expires_at": draft.expires_at,
                    "decided_by": None,
                    "decided_by_name": None,
                    "decided_at": None,
                    "reason": draft.reason,
                    "result": None,
                    "executed_at": None,
                    "card_channel": None,
                    "card_ts": None,
                    "card_claimed_until": None,
                    "kind": draft.kind,
                    "token_hash": draft.token_hash,
                    "due_at": draft.due_at,
                    "rule": draft.rule,
                    "rule_when": draft.rule_when,
                    "rule_error": draft.rule_error,
                    "min_approvals": draft.min_approvals,
                    "approved_by": None,
                    **edit_columns(draft.allow_edit, draft.edited_arguments),
                }
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
            if rows:
                tx.executemany(INSERT_APPROVAL, [APPROVALS.params(r) for r in rows])
                tx.executemany(INSERT_APPROVER, approver_rows(rows))
                insert_reach(tx, rows, reach_plans)
            tx.executemany(INSERT_AUDIT, audits)
            waiting = [APPROVALS.build(r) for r in rows] + [
                a for a in adopted if a.status == "pending"
            ]
            # A callback may have completed before this pause was stored: nothing new waits.
            claimed = not waiting and claim_resume(tx, run_id, claimer or worker, lease_until, now)
            return PauseOutcome(approvals=waiting, resume_claimed=claimed)

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

    async def finish_run(
        self,
        run_id: str,
        *,
        worker: str,
        status: str,
        now: datetime,
        history: list[dict[str, Any]] | None = None,
        answer: str | None = None,
        error: str | None = None,
    ) -> None:
        if status not in FINISHED_RUN_STATUSES:
            raise ValueError(f"not a final status: {status}")
        params: dict[str, Any] = {
            "id": run_id,
            "worker": worker,
            "status": status,
            "answer": answer,
            "error": error,
            "now": now,
        }
        sql = FINISH_RUN_KEEP_HISTORY
        if history is not None:
            params["history"] = json_text(history)
            sql = FINISH_RUN_WITH_HISTORY

        def body(tx: Tx, *, settle_approvals: bool = True) -> None:
            if tx.execute(sql, params) != 1:
                raise LeaseLost(run_id)
            audit(tx, now, f"run_{status}", run_id=run_id, error=error)
            if settle_approvals and status in ("failed", "cancelled"):
                cancel_unfinished_approvals(tx, run_id, f"the run {status}: {error}", now)

        try:
            await self.database.run(body, WRITE)
        except DATABASE_FAILURES as exc:
            if status not in ("failed", "cancelled"):
                raise
            # The run's end must be recorded even when its approvals cannot be written (the
            # failure it reports may be that very table): end it alone, and say so.
            log.error("run %s: its approvals could not be cancelled with it: %s", run_id, exc)
            await self.database.run(lambda tx: body(tx, settle_approvals=False), WRITE)

    async def start_resumed_run(
        self,
        run_id: str,
        *,
        worker: str,
        lease_until: datetime,
        now: datetime,
        owner: str | None = None,
    ) -> Run:
        """``resuming -> running`` for the worker that claimed the resume (as ``worker``, or
        for one of its drives, ``worker/…``).

        ``owner`` (default ``worker``) then holds the lease: one drive, not the whole worker,
        so a second drive of the same run in the same process is fenced off. Not needed after
        a decision this worker claimed with a drive's owner (see ``decide``): that drive holds
        the lease already.
        """
        params = {
            "id": run_id,
            "worker": worker,
            "prefix": f"{worker}/",
            "prefix_length": len(worker) + 1,
            "owner": owner or worker,
            "lease_until": lease_until,
            "now": now,
        }

        def body(tx: Tx) -> Run:
            row = tx.one(START_RESUMED_RUN, params)
            if row is None:
                raise LeaseLost(run_id)
            # No audit: the claim that left the run ``resuming`` recorded its resume.
            return RUNS.load(tx, row)

        return await self.database.run(body, WRITE)

    async def stale_runs(self, now: datetime, limit: int = 100) -> list[str]:
        """Runs whose worker stopped renewing its lease (it crashed or lost the database)."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(STALE_RUNS, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def take_over_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> Run | None:
        """Take a run whose lease ran out; None when it is not stale (any more)."""

        def body(tx: Tx) -> Run | None:
            params = {"id": run_id, "worker": worker, "lease_until": lease_until, "now": now}
            row = tx.one(TAKE_OVER_RUN, params)
            if row is None:
                return None
            audit(tx, now, "run_taken_over", run_id=run_id, worker=worker)
            return RUNS.load(tx, row)

        return await self.database.run(body, WRITE)

    async def stranded_runs(self, limit: int = 100) -> list[str]:
        """Paused runs with no approval pending whose resume nobody claimed."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(STRANDED_RUNS, {"limit": limit})]

        return await self.database.run(body, READ_ONE, inline=False)

    async def claim_stranded_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> bool:
        """Claim the resume of a paused run with nothing pending; False if someone else did,
        or it is not paused (any more), or an approval is pending after all."""

        def body(tx: Tx) -> bool:
            lock_run(tx, run_id)
            if not claim_resume(tx, run_id, worker, lease_until, now):
                return False
            audit(tx, now, "stranded_resume_claimed", run_id=run_id, worker=worker)
            return True

        return await self.database.run(body, WRITE)

    async def cancel_run(self, run_id: str, *, reason: str, actor: str, now: datetime) -> bool:
        """Cancel a paused run and every approval still pending in it."""

        def body(tx: Tx) -> bool:
            cancelled = cancel_paused_run(tx, run_id, reason, now)
            if cancelled:
                audit(tx, now, "run_cancel_requested", run_id=run_id, actor=actor)
            return cancelled

        return await self.database.run(body, WRITE)

    # -- the progress message ------------------------------------------------------------

    async def set_progress(self, run_id: str, ts: str) -> None:
        """Record the run's progress message, which the run's next outcome replaces."""

        def body(tx: Tx) -> None:
            tx.execute(SET_PROGRESS, {"id": run_id, "ts": ts})

        await self.database.run(body, WRITE)

    async def clear_progress(self, run_id: str, ts: str) -> None:
        """The progress message ``ts`` was replaced by an outcome: the next one posts anew."""

        def body(tx: Tx) -> None:
            tx.execute(CLEAR_PROGRESS, {"id": run_id, "ts": ts})

        await self.database.run(body, WRITE)

    # -- approvals ---------------------------------------------------------------------
