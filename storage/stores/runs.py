"""Runs: start a conversation's run or continue its finished one, end it, cancel it, and its
progress message.

Owns the ``runs`` rows: one agent conversation per Slack thread, with its stored ``llm``
history. Statuses: ``running -> paused -> resuming -> running -> completed | failed |
cancelled``; every change is one conditional UPDATE whose row count says who won, and only
the drive holding the run's lease moves it (:mod:`.leases`). Pausing is :mod:`.pauses`'s.
A new request is stored, with the Slack event it came in, before any model call, so a crash
mid-turn loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.limits import DATABASE_FAILURES
from storage.models import Approval, Run
from storage.records import FINISHED_RUN_STATUSES, DuplicateEvent, LeaseLost, RunBusy
from storage.sql.approvals import APPROVALS_FOR_TURN
from storage.sql.events import CLAIM_EVENT, audit_row, audited_params
from storage.sql.runs import (
    CLEAR_PROGRESS,
    CONTINUE_RUN,
    FINISH_RUN_KEEP_HISTORY,
    FINISH_RUN_WITH_HISTORY,
    INSERT_RUN,
    INSERT_RUN_AUDITED,
    RETURNING_PARENT,
    RUN_BY_ID,
    RUN_BY_KEY,
    SET_PROGRESS,
    SET_WAITING_PROGRESS,
)
from storage.stores.answers import store_answer
from storage.stores.events import audit
from storage.stores.rows import APPROVALS, RUNS
from storage.stores.transitions import (
    cancel_paused_run,
    cancel_unfinished_approvals,
    run_busy,
    settle_parent,
)
from storage.values import json_text, storable

log = logging.getLogger(__name__)

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE

# (history, run status, run error, approvals of the run's last turn) -> history in which
# every tool call has a result. Given by the engine: storage does not read llm messages.
SettleHistory = Callable[
    [list[dict[str, Any]], str, str | None, list[Approval]], list[dict[str, Any]]
]


class RunStore:
    database: Database

    async def run_of_conversation(self, conversation_key: str) -> Run | None:
        """The run a conversation (a thread: ``Request.key()``) started, if any."""

        def body(tx: Tx) -> Run | None:
            row = tx.one(RUN_BY_KEY, {"key": conversation_key})
            return None if row is None else RUNS.load(tx, row)

        return await self.database.run(body, READ_ONE)

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
            # A new conversation first (the common case): its INSERT is also the check that
            # none exists, one round trip fewer than reading the key before.
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
            if tx.dialect == "postgresql":  # with its audit row, in one round trip
                started = audit_row(
                    now, "run_started", run_id=run_id, actor=requester, event_id=event_id
                )
                params = audited_params(RUNS.params(values), started)
                if tx.one(INSERT_RUN_AUDITED, params) is not None:
                    return RUNS.build(values)
            elif tx.execute(INSERT_RUN, RUNS.params(values)) == 1:
                audit(tx, now, "run_started", run_id=run_id, actor=requester, event_id=event_id)
                return RUNS.build(values)
            row = tx.one(RUN_BY_KEY, {"key": conversation_key})
            assert row is not None  # the INSERT met it (runs are never deleted)
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
        claimer: str | None = None,
        lease_until: datetime | None = None,
    ) -> str | None:
        """End a run this drive holds (LeaseLost otherwise), with its answer in the outbox.

        A child run's end settles its parent's ``delegation`` row in the same transaction and,
        with ``claimer``, claims the parent's resume when nothing else of it waits: returns
        the parent's id then (the caller resumes it), else None."""
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
        sql = FINISH_RUN_KEEP_HISTORY + RETURNING_PARENT
        if history is not None:
            params["history"] = json_text(history)
            sql = FINISH_RUN_WITH_HISTORY + RETURNING_PARENT

        def body(tx: Tx, *, settle_approvals: bool = True) -> str | None:
            link = tx.one(sql, params)
            if link is None:
                raise LeaseLost(run_id)
            audit(tx, now, f"run_{status}", run_id=run_id, error=error)
            # Its last message, with the end: posted until Slack takes it (:mod:`.answers`).
            store_answer(tx, run_id, status, answer if status == "completed" else error, now)
            if settle_approvals and status in ("failed", "cancelled"):
                cancel_unfinished_approvals(tx, run_id, f"the run {status}: {error}", now)
            return settle_parent(
                tx,
                run_id,
                status,
                answer=answer,
                error=error,
                now=now,
                claimer=claimer,
                lease_until=lease_until,
                link=link,
            )

        try:
            return await self.database.run(body, WRITE)
        except DATABASE_FAILURES as exc:
            if status not in ("failed", "cancelled"):
                raise
            # The run's end must be recorded even when its approvals cannot be written (the
            # failure it reports may be that very table): end it alone, and say so.
            log.error("run %s: its approvals could not be cancelled with it: %s", run_id, exc)
            return await self.database.run(lambda tx: body(tx, settle_approvals=False), WRITE)

    async def cancel_run(self, run_id: str, *, reason: str, actor: str, now: datetime) -> bool:
        """Cancel a paused run and every approval still pending in it."""

        def body(tx: Tx) -> bool:
            cancelled = cancel_paused_run(tx, run_id, reason, now)
            if cancelled:
                audit(tx, now, "run_cancel_requested", run_id=run_id, actor=actor)
            return cancelled

        return await self.database.run(body, WRITE)

    async def set_progress(self, run_id: str, ts: str) -> None:
        """Record the run's progress message, which the run's next outcome replaces."""

        def body(tx: Tx) -> None:
            tx.execute(SET_PROGRESS, {"id": run_id, "ts": ts})

        await self.database.run(body, WRITE)

    async def set_waiting_progress(self, run_id: str, ts: str) -> bool:
        """Record a pause's waiting message as the progress message; False: the run no
        longer waits (decided before the message was posted), and nothing is recorded."""

        def body(tx: Tx) -> bool:
            return tx.execute(SET_WAITING_PROGRESS, {"id": run_id, "ts": ts}) == 1

        return await self.database.run(body, WRITE)

    async def clear_progress(self, run_id: str, ts: str) -> None:
        """The progress message ``ts`` was replaced by an outcome: the next one posts anew."""

        def body(tx: Tx) -> None:
            tx.execute(CLEAR_PROGRESS, {"id": run_id, "ts": ts})

        await self.database.run(body, WRITE)
