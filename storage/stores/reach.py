"""The approvers' reach: DM copies of cards, the one reminder, the one escalation.

Owns ``approval_reach`` (written with each approval that names approvers or reminds or
escalates, :func:`insert_reach`) and ``approval_messages`` (every DM copy of a card, so any
replica edits them all). Which App Homes to publish again is :mod:`.home`'s.

Every step that must happen once is a conditional UPDATE (or DELETE) whose row count says
who won, as everywhere in the repository: replicas and restarts share the work through it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.models import Approval
from storage.records import CopyPlace, Escalation, ReachState
from storage.sql.approvals import APPROVAL_BY_ID
from storage.sql.reach import (
    ADD_APPROVER,
    ADD_MESSAGE,
    BATCH_PENDING_APPROVERS,
    CLAIM_DMS,
    CLAIM_ESCALATION,
    CLAIM_REMINDERS,
    DMS_CLAIM_HELD,
    DMS_RETRY,
    DMS_SENT,
    DMS_TO_SEND,
    ESCALATE_APPROVERS,
    ESCALATIONS_DUE,
    INSERT_REACH,
    MESSAGE_IN,
    MESSAGES_OF,
    REACH_OF,
    RENEW_DMS,
    ReachPlan,
    reach_rows,
)
from storage.stores.events import audit
from storage.stores.rows import APPROVALS
from storage.stores.transitions import lock_run_of_approval
from storage.values import json_text

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE


def insert_reach(tx: Tx, rows: Sequence[dict[str, Any]], plans: dict[str, ReachPlan]) -> None:
    """Inside the pause's transaction: the reach rows of its new approvals (deferred, as
    the pause's other rows: nothing later in it reads them)."""
    reach = reach_rows(rows, plans)
    if reach:
        tx.defer(INSERT_REACH, reach)


def _ids(value: Any) -> list[str]:
    loaded = json.loads(value) if isinstance(value, str) else value
    return [str(v) for v in loaded or []]


def _when(tx: Tx, value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return tx.converters["datetime"](value)


class ReachStore:
    database: Database

    async def claim_dms(
        self, approval_id: str, *, now: datetime, until: datetime
    ) -> tuple[Approval, ReachState] | None:
        """Claim sending an approval's DM copies until ``until`` (one sender at a time);
        None when they are sent, claimed elsewhere, or the approval no longer waits."""

        def body(tx: Tx) -> tuple[Approval, ReachState] | None:
            row = tx.one(CLAIM_DMS, {"id": approval_id, "now": now, "until": until})
            if row is None:
                return None
            approval_row = tx.one(APPROVAL_BY_ID, {"id": approval_id})
            if approval_row is None:
                return None
            given_up = tuple(_ids(row[3])) if row[3] else ()
            state = ReachState(None, _when(tx, row[0]), _ids(row[1]), row[2] or 0, given_up)
            return APPROVALS.load(tx, approval_row), state

        return await self.database.run(body, WRITE)

    async def renew_dms_claim(self, approval_id: str, *, held: datetime, until: datetime) -> bool:
        """Extend a claim on an approval's DM copies still held (claimed until ``held``) to
        ``until``; False when it lapsed and another sender took it or finished."""

        def body(tx: Tx) -> bool:
            params = {"id": approval_id, "held": held, "until": until}
            return tx.execute(RENEW_DMS, params) == 1

        return await self.database.run(body, WRITE_ONE)

    async def dms_sent(
        self,
        approval_id: str,
        *,
        now: datetime,
        until: datetime,
        given_up: Collection[str] = (),
        retry_at: datetime | None = None,
        attempts: int = 0,
    ) -> None:
        """The claim (held until ``until``) ends: every copy is out, or given up for the
        recipients in ``given_up``; with ``retry_at`` some failed for now and are due again
        then (``attempts``: failed attempts so far)."""
        params = {
            "id": approval_id,
            "now": now,
            "until": until,
            "given_up": json_text(sorted(given_up)) if given_up else None,
            "retry_at": retry_at,
            "attempts": attempts,
        }

        def body(tx: Tx) -> None:
            tx.execute(DMS_SENT if retry_at is None else DMS_RETRY, params)

        await self.database.run(body, WRITE_ONE)

    async def dms_to_send(
        self, now: datetime, *, created_before: datetime, limit: int = 100
    ) -> list[str]:
        """Approvals whose DM copies no live sender is sending (the DM outbox)."""
        params = {"now": now, "created_before": created_before, "limit": limit}

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(DMS_TO_SEND, params)]

        return await self.database.run(body, READ_ONE)

    async def add_approval_message(
        self, approval_id: str, *, recipient: str, channel: str, ts: str, now: datetime
    ) -> None:
        params = {
            "approval_id": approval_id,
            "recipient": recipient,
            "kind": "dm",
            "channel": channel,
            "ts": ts,
            "now": now,
        }

        def body(tx: Tx) -> None:
            tx.execute(ADD_MESSAGE, params)

        await self.database.run(body, WRITE_ONE)

    async def approval_messages(self, approval_id: str) -> list[CopyPlace]:
        """Every DM copy of an approval's card."""

        def body(tx: Tx) -> list[CopyPlace]:
            return [CopyPlace(*row) for row in tx.all(MESSAGES_OF, {"id": approval_id})]

        return await self.database.run(body, READ_ONE)

    async def is_copy_channel(self, approval_id: str, channel: str) -> bool:
        """Whether a copy of the approval's card was posted in ``channel`` (a DM)."""

        def body(tx: Tx) -> bool:
            return tx.one(MESSAGE_IN, {"id": approval_id, "channel": channel}) is not None

        return await self.database.run(body, READ_ONE)

    async def dms_claim_held(self, approval_id: str, *, now: datetime) -> bool:
        """Whether a sender holds the claim on the approval's copies now (they may come)."""

        def body(tx: Tx) -> bool:
            return tx.one(DMS_CLAIM_HELD, {"id": approval_id, "now": now}) is not None

        return await self.database.run(body, READ_ONE)

    async def reach_of(self, approval_id: str) -> ReachState | None:
        def body(tx: Tx) -> ReachState | None:
            row = tx.one(REACH_OF, {"id": approval_id})
            if row is None:
                return None
            return ReachState(_when(tx, row[0]), _when(tx, row[1]), _ids(row[2]))

        return await self.database.run(body, READ_ONE)

    async def claim_reminders(self, now: datetime) -> list[str]:
        """The approvals whose one reminder is due now, claimed: each is returned once, to
        one caller, ever (and never once it is decided)."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(CLAIM_REMINDERS, {"now": now})]

        ids = await self.database.run(body, WRITE_ONE)
        for approval_id in ids:
            await self._audit(approval_id, "approval_reminded", now)
        return ids

    async def _audit(self, approval_id: str, event: str, now: datetime, **detail: Any) -> None:
        def body(tx: Tx) -> None:
            row = tx.one(APPROVAL_BY_ID, {"id": approval_id})
            run_id = None if row is None else APPROVALS.load(tx, row).run_id
            audit(tx, now, event, run_id=run_id, approval_id=approval_id, **detail)

        await self.database.run(body, WRITE)

    async def audit_reach(
        self, approval_id: str, event: str, *, now: datetime, **detail: Any
    ) -> None:
        """Append a reach event (reminder recipients, a capped group) to the audit."""
        await self._audit(approval_id, event, now, **detail)

    async def escalations_due(self, now: datetime, limit: int = 100) -> list[str]:
        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(ESCALATIONS_DUE, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def escalate(self, approval_id: str, *, now: datetime) -> Escalation | None:
        """Add the policy's ``escalate_to`` to a pending approval's approvers, once ever.

        Serialized with decisions on the run's lock (PostgreSQL) so a decision and an
        escalation never interleave. An approval anyone may decide stays so (adding names
        would narrow who may decide); its escalation still reaches the named people.
        """

        def body(tx: Tx) -> Escalation | None:
            lock_run_of_approval(tx, approval_id)
            row = tx.one(CLAIM_ESCALATION, {"id": approval_id, "now": now})
            if row is None:
                return None
            escalate_to = _ids(row[0])
            approval_row = tx.one(APPROVAL_BY_ID, {"id": approval_id})
            if approval_row is None:
                return None
            approval = APPROVALS.load(tx, approval_row)
            added = [a for a in escalate_to if a not in approval.approvers]
            for row_id, row_approvers in tx.all(BATCH_PENDING_APPROVERS, {"id": approval_id}):
                # Each call of a batch keeps its own approvers (an edit may have made them
                # stricter than the lead's), with the escalation's added to them.
                own = _ids(row_approvers)
                new = [a for a in escalate_to if a not in own]
                if not own or not new:
                    continue  # anyone may decide it (names would narrow that), or no one new
                approvers = [*own, *new]
                tx.execute(ESCALATE_APPROVERS, {"id": row_id, "approvers": json_text(approvers)})
                tx.executemany(ADD_APPROVER, [{"approver": a, "approval_id": row_id} for a in new])
                if row_id == approval_id:
                    approval.approvers = approvers
            audit(
                tx,
                now,
                "approval_escalated",
                run_id=approval.run_id,
                approval_id=approval_id,
                added=added,
            )
            return Escalation(approval=approval, added=added)

        return await self.database.run(body, WRITE)
