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
from storage.errors import DuplicateEvent, LeaseLost, RunBusy
from storage.limits import DATABASE_FAILURES
from storage.models import Approval, Run
from storage.records import FINISHED_RUN_STATUSES
from storage.sql.approvals import APPROVALS_FOR_TURN
from storage.sql.events import CLAIM_EVENT, INSERT_AUDIT, audit_row, audited_params
from storage.sql.holds import DROP_HOLD
from storage.sql.runs import (
    CLEAR_PROGRESS,
    CONTINUE_RUN,
    CONTINUE_RUN_AUDITED,
    FINISH_RUN_ALONE,
    FINISH_RUN_KEEP_HISTORY,
    FINISH_RUN_WITH_HISTORY,
    INSERT_RUN,
    INSERT_RUN_AUDITED,
    OPEN_NEW_RUN_WITH_EVENT,
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

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE

# PostgreSQL: a new conversation's start and a parentless run's end in one statement each
# (storage.sql.runs: OPEN_NEW_RUN_WITH_EVENT, FINISH_RUN_ALONE), before the full transaction.
# False only in tests, which compare the rows both ways write.
ONE_STATEMENT = True
UNIQUE_VIOLATION = "23505"  # PostgreSQL's SQLSTATE

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

        PostgreSQL: a new conversation is one statement (OPEN_NEW_RUN_WITH_EVENT), which
        stores nothing unless it stores it all; any other case is the full transaction.
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
        started = audit_row(now, "run_started", run_id=run_id, actor=requester, event_id=event_id)
        # The conversation's run exists (committed: runs are never deleted), as the
        # one-statement start found: the full transaction need not try inserting it again.
        exists = False

        def open_new(tx: Tx) -> bool:
            """A new conversation (the common case) in one statement; whether it was one.
            An INSERT that conflicts is also the check that the conversation has a run."""
            nonlocal exists
            params = audited_params(RUNS.params(values), started)
            if event_id is None:
                opened = tx.one(INSERT_RUN_AUDITED, params) is not None
                exists = not opened
                return opened
            row = tx.one(OPEN_NEW_RUN_WITH_EVENT, {**params, "event_id": event_id, "now": now})
            assert row is not None  # its SELECT has no FROM: always one row
            # Not inserted though the event was not handled: the conversation's run was there.
            exists = row[0] is None and not row[1]
            return row[0] is not None

        def open_in(tx: Tx) -> Run:
            # A new conversation first (the common case): its INSERT is also the check that
            # none exists, one round trip fewer than reading the key before.
            if not exists and tx.dialect == "postgresql":  # with its audit row: one round trip
                params = audited_params(RUNS.params(values), started)
                if tx.one(INSERT_RUN_AUDITED, params) is not None:
                    return RUNS.build(values)
            elif not exists and tx.execute(INSERT_RUN, RUNS.params(values)) == 1:
                tx.defer(INSERT_AUDIT, [started])
                return RUNS.build(values)
            row = tx.one(RUN_BY_KEY, {"key": conversation_key})
            assert row is not None  # the INSERT met it (runs are never deleted)
            current = RUNS.values(tx, row)
            if current["status"] not in FINISHED_RUN_STATUSES:
                raise RunBusy(RUNS.build(current))
            history = current["history"]
            if settle_history is not None and current["status"] in ("failed", "cancelled"):
                params = {"run_id": current["id"], "turn": current["turn"]}
                approvals = [APPROVALS.load(tx, r) for r in tx.all(APPROVALS_FOR_TURN, params)]
                settled = settle_history(history, current["status"], current["error"], approvals)
                history = storable(settled)
            current.update(
                status="running",
                requester=requester,
                model_id=model_id,
                history=[*history, *storable(new_messages)],
                # A new request is a new turn: approvals of earlier turns never answer its
                # calls, even when a provider reuses tool call ids like "call_0".
                turn=current["turn"] + 1,
                answer=None,
                error=None,
                lease_owner=worker,
                lease_expires_at=lease_until,
                updated_at=now,
                progress_ts=None,
            )
            continued = audit_row(
                now, "run_continued", run_id=current["id"], actor=requester, event_id=event_id
            )
            if tx.dialect == "postgresql":  # with its audit row, in one round trip
                params = audited_params(RUNS.params(current), continued)
                moved = tx.one(CONTINUE_RUN_AUDITED, params) is not None
            else:
                moved = tx.execute(CONTINUE_RUN, RUNS.params(current)) == 1
                if moved:
                    tx.defer(INSERT_AUDIT, [continued])
            if not moved:
                raise run_busy(tx, conversation_key)  # another replica continued it first
            return RUNS.build(current)

        if ONE_STATEMENT and self.database.dialect == "postgresql":
            try:
                if await self.database.run(open_new, WRITE_ONE):
                    return RUNS.build(values)
            except DATABASE_FAILURES as exc:
                # Another transaction claimed the event since the statement's snapshot: it
                # stored nothing (one statement), and the full transaction says DuplicateEvent.
                if getattr(getattr(exc, "orig", None), "sqlstate", None) != UNIQUE_VIOLATION:
                    raise
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
        the parent's id then (the caller resumes it), else None. PostgreSQL: a run that is
        nobody's child ends in one statement (FINISH_RUN_ALONE), which changes nothing for
        any other run; those end in the full transaction."""
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

        cancel = status in ("failed", "cancelled")
        reason = f"the run {status}: {error}"

        def body(tx: Tx, *, settle_approvals: bool = True) -> str | None:
            link = tx.one(sql, params)
            if link is None:
                raise LeaseLost(run_id)
            audit(tx, now, f"run_{status}", run_id=run_id, error=error)
            # A hold asked for while it worked: the run ended first; not the next request's.
            tx.execute(DROP_HOLD, {"run_id": run_id})
            # Its last message, with the end: posted until Slack takes it (:mod:`.answers`).
            store_answer(tx, run_id, status, answer if status == "completed" else error, now)
            if settle_approvals and cancel:
                cancel_unfinished_approvals(tx, run_id, reason, now)
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

        def alone(tx: Tx) -> bool:
            """The run's end in one statement when it is nobody's child (the common case);
            whether it ended so. Else it changed nothing: the full transaction follows."""
            ended = audit_row(now, f"run_{status}", run_id=run_id, error=error)
            alone_params = {
                **audited_params(params, ended),
                "text": answer if status == "completed" else error,
                "reason": reason,
                "cancel_detail": audit_row(now, "approval_cancelled", reason=reason)["detail"],
            }
            return tx.one(FINISH_RUN_ALONE[history is not None, cancel], alone_params) is not None

        try:
            one_statement = ONE_STATEMENT and self.database.dialect == "postgresql"
            if one_statement and await self.database.run(alone, WRITE_ONE):
                return None
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

        await self.database.run(body, WRITE_ONE)

    async def set_waiting_progress(self, run_id: str, ts: str) -> bool:
        """Record a pause's waiting message as the progress message; False: the run no
        longer waits (decided before the message was posted), and nothing is recorded."""

        def body(tx: Tx) -> bool:
            return tx.execute(SET_WAITING_PROGRESS, {"id": run_id, "ts": ts}) == 1

        return await self.database.run(body, WRITE_ONE)

    async def clear_progress(self, run_id: str, ts: str) -> None:
        """The progress message ``ts`` was replaced by an outcome: the next one posts anew."""

        def body(tx: Tx) -> None:
            tx.execute(CLEAR_PROGRESS, {"id": run_id, "ts": ts})

        await self.database.run(body, WRITE_ONE)
