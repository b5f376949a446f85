"""Pausing a run: its paused history and the rows it waits on, in one transaction.

Owns the ``approvals`` rows a pause creates, of every kind (an approval, a question, a callback
adopted from its armed row, a retry), with their approvers (``approval_approvers``), their
reach (``approval_reach``, :mod:`.reach`) and their audit, written with the run's ``paused``
history so that a paused run always has what it waits on. A pause whose rows were all settled
meanwhile (a callback that already came back) claims its own resume.

On PostgreSQL the common pause (new rows only, no hold) is first tried as one statement in
autocommit (:func:`fast_pause`, :mod:`storage.sql.pauses`): the same rows, one round trip
instead of four; when it does not apply it writes nothing and the whole transaction runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Integer, String

from storage.drivers import Database, Mode, Tx
from storage.errors import LeaseLost, RunHeld, StorageError, ValueTooLong
from storage.models import Approval, Base, Run
from storage.records import ApprovalDraft, PauseOutcome
from storage.sql.approvals import (
    INSERT_APPROVAL,
    INSERT_APPROVER,
    RETAG_STILL_PENDING,
    approval_row,
    approver_rows,
)
from storage.sql.events import INSERT_AUDIT, audit_row, rule_matched_row
from storage.sql.pauses import fast_pause_sql, guarded_params
from storage.sql.reach import INSERT_REACH, ReachPlan, reach_rows
from storage.sql.runs import PAUSE_RUN
from storage.sql.waits import ADOPT_CALLBACK
from storage.stores.delegations import hold_children_as_parent, insert_children
from storage.stores.events import asked_for
from storage.stores.reach import insert_reach
from storage.stores.rows import APPROVALS
from storage.stores.transitions import claim_resume, lock_run
from storage.values import json_text, storable

WRITE, WRITE_ONE = Mode.WRITE, Mode.WRITE_ONE
# PostgreSQL stores the common pause in one statement (fast_pause); tests turn it off to
# compare its rows with the whole transaction's.
FAST_PAUSE = True

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


def pause_rows(
    run_id: str,
    drafts: Sequence[ApprovalDraft],
    *,
    turn: int,
    requester: str,
    team_id: str,
    channel: str,
    thread_ts: str,
    agent: str | None,
    now: datetime,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A pause's new ``approvals`` rows (its drafts not adopted) and its audit rows, in order:
    the same for the whole transaction and the one-statement pause."""
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
            **asked_for(draft),
            **({"min_approvals": draft.min_approvals} if draft.min_approvals > 1 else {}),
        )
        for draft in drafts
    ]
    audits += [rule_matched_row(now, run_id, requester, d) for d in drafts if d.rule]
    return rows, audits


def _casts(table: str) -> dict[str, str]:
    """The SQL types of ``table``'s columns that a parameter typed as text cannot fill (text
    fills text and varchar columns, whose length the column still checks)."""
    casts = {}
    for column in Base.metadata.tables[table].columns:
        kind = column.type
        if isinstance(kind, String):
            continue
        if isinstance(kind, DateTime):
            casts[column.name] = "TIMESTAMP"
        elif isinstance(kind, JSON):
            casts[column.name] = "JSON"
        elif isinstance(kind, Boolean):
            casts[column.name] = "BOOLEAN"
        elif isinstance(kind, Integer):
            casts[column.name] = "INTEGER"
        else:
            raise TypeError(f"{table}.{column.name}: no cast for {kind!r}")
    return casts


# The tables of a one-statement pause: (tag, INSERT, casts), in the order of the transaction's
# deferred rows (rows of different tables have no order among them).
_FAST_TABLES = (
    ("a", INSERT_APPROVAL, _casts("approvals")),
    ("p", INSERT_APPROVER, _casts("approval_approvers")),
    ("r", INSERT_REACH, _casts("approval_reach")),
    ("e", INSERT_AUDIT, _casts("audit_events")),
)


@lru_cache(maxsize=128)
def _fast_statement(counts: tuple[int, ...]) -> str:
    """The one-statement pause for these numbers of rows per table (a few shapes in all)."""
    tables = zip(_FAST_TABLES, counts, strict=True)
    return fast_pause_sql([(tag, insert, count, casts) for (tag, insert, casts), count in tables])


def fast_pause(
    run: Run,
    *,
    worker: str,
    history_text: str,
    drafts: Sequence[ApprovalDraft],
    reach_plans: dict[str, ReachPlan],
    now: datetime,
) -> tuple[str, Mapping[str, Any], list[dict[str, Any]]]:
    """The common pause as one statement (PostgreSQL): its text, parameters and approval rows.

    For a pause of new rows only (nothing adopted or delegated, nothing of an earlier turn
    still pending): its rows are those the whole transaction would make from ``run`` as the
    drive knows it, and the run's UPDATE applies only while the row still is so and no hold
    is asked for (``PAUSE_FREE_RUN``), else the statement writes nothing.
    """
    rows, audits = pause_rows(
        run.id,
        drafts,
        turn=run.turn + 1,
        requester=run.requester,
        team_id=run.team_id,
        channel=run.channel,
        thread_ts=run.thread_ts,
        agent=run.agent,
        now=now,
    )
    tables = (
        [APPROVALS.params(r) for r in rows],
        approver_rows(rows),
        reach_rows(rows, reach_plans),
        audits,
    )
    params: dict[str, Any] = {
        "id": run.id,
        "worker": worker,
        "history": history_text,
        "now": now,
        "turn": run.turn,
        "requester": run.requester,
        "team_id": run.team_id,
        "channel": run.channel,
        "thread_ts": run.thread_ts,
        "agent": run.agent,
    }
    for (tag, _, _), table_rows in zip(_FAST_TABLES, tables, strict=True):
        guarded_params(table_rows, tag, params)
    statement = _fast_statement(tuple(len(t) for t in tables))
    return statement, params, rows


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
        run: Run | None = None,
    ) -> PauseOutcome:
        """Store the paused history and its new pending approvals in one transaction.

        A pause with no new drafts waits on approvals from an earlier turn; if those were all
        decided while the run was running, this worker claims the resume itself (as
        ``claimer``, default ``worker``: whoever then calls ``start_resumed_run``).

        ``stop_if_held``: this transaction is the safe point of the calls the drafts are for
        (nothing ran between them and it). If an operator's hold is asked for on the run,
        nothing is written and RunHeld is raised. A Stop raises RunHeld in any case: the
        run ends at this pause rather than waiting under a hold nothing releases.

        ``run``: the run as its drive knows it. On PostgreSQL a pause of new rows only is then
        tried as one statement first (:func:`fast_pause`), which writes nothing unless the row
        is still as ``run`` says and no hold is asked for; otherwise the whole transaction
        runs, as without ``run``.
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
        if (
            FAST_PAUSE
            and run is not None
            and run.id == run_id
            and drafts
            and not still_pending
            and self.database.dialect == "postgresql"
            and not any(d.adopt or d.child is not None for d in drafts)
        ):
            statement, fast_params, fast_rows = fast_pause(
                run,
                worker=worker,
                history_text=history_text,
                drafts=drafts,
                reach_plans=reach_plans,
                now=now,
            )

            def paused(tx: Tx) -> bool:
                return tx.one(statement, fast_params) is not None

            # Autocommit: what the statement wrote is committed; it wrote nothing when it
            # returned no row, and the whole transaction below says why (LeaseLost, a hold).
            if await self.database.run(paused, WRITE_ONE):
                return PauseOutcome([APPROVALS.build(r) for r in fast_rows], resume_claimed=False)

        def body(tx: Tx) -> PauseOutcome:
            params = {"id": run_id, "worker": worker, "history": history_text, "now": now}
            # The run's lock first (see LOCK_RUN), in a statement of its own: PAUSE_RUN reads
            # the run's hold, which a Stop committed while this waited for the lock would be
            # missing from in the same statement's snapshot. Re-tagging an approval locks that
            # row too, so a decision landing meanwhile either waits for this pause or is seen
            # by its claim.
            lock_run(tx, run_id)
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
            rows, audits = pause_rows(
                run_id,
                drafts,
                turn=turn,
                requester=requester,
                team_id=team_id,
                channel=channel,
                thread_ts=thread_ts,
                agent=agent,
                now=now,
            )
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
