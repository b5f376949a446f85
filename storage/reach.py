"""The approvers' reach: DM copies of cards, the one reminder, the one escalation (owns
``approval_reach`` and ``approval_messages``), and which App Homes to publish again (owns
``home_viewers`` and ``home_dirty``).

Every step that must happen once is a conditional UPDATE (or DELETE) whose row count says
who won, as everywhere in the repository: replicas and restarts share the work through it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from storage.db import Database, Mode, Tx, json_text
from storage.models import Approval
from storage.rows import APPROVALS
from storage.statements import APPROVAL_BY_ID, audit, lock_run_of_approval

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE

INSERT_REACH = (
    "INSERT INTO approval_reach (approval_id, created_at, remind_at, escalate_at, escalate_to) "
    "VALUES (:approval_id, :created_at, :remind_at, :escalate_at, :escalate_to)"
)
_PENDING_APPROVAL = (
    "approval_id IN (SELECT id FROM approvals WHERE status = 'pending' AND expires_at > :now)"
)
_NO_LIVE_DM_CLAIM = (
    "(dms_claimed_until IS NULL OR dms_claimed_until < :now) "
    "AND (dms_retry_at IS NULL OR dms_retry_at <= :now)"
)
CLAIM_DMS = (
    "UPDATE approval_reach SET dms_claimed_until = :until WHERE approval_id = :id "
    f"AND dms_sent_at IS NULL AND {_NO_LIVE_DM_CLAIM} AND {_PENDING_APPROVAL} "
    "RETURNING escalated_at, escalate_to, dms_attempts, dms_given_up"
)
DMS_SENT = (
    "UPDATE approval_reach SET dms_sent_at = :now, dms_claimed_until = NULL, "
    "dms_retry_at = NULL, dms_given_up = :given_up "
    "WHERE approval_id = :id AND dms_claimed_until = :until"
)
# Some copies failed for now: released, and due again at :retry_at (the sweeper sends them).
DMS_RETRY = (
    "UPDATE approval_reach SET dms_claimed_until = NULL, dms_retry_at = :retry_at, "
    "dms_attempts = :attempts, dms_given_up = :given_up "
    "WHERE approval_id = :id AND dms_claimed_until = :until"
)
# A sender renews its claim before each copy: one whose claim lapsed and was taken (or
# finished) by another sender stops instead of posting the copies that one posts.
RENEW_DMS = (
    "UPDATE approval_reach SET dms_claimed_until = :until WHERE approval_id = :id "
    "AND dms_claimed_until = :held AND dms_sent_at IS NULL"
)
DMS_TO_SEND = (
    "SELECT approval_id FROM approval_reach WHERE dms_sent_at IS NULL "
    f"AND created_at <= :created_before AND {_NO_LIVE_DM_CLAIM} AND {_PENDING_APPROVAL} "
    "ORDER BY created_at LIMIT :limit"
)
CLAIM_REMINDERS = (
    "UPDATE approval_reach SET reminded_at = :now WHERE reminded_at IS NULL "
    f"AND remind_at IS NOT NULL AND remind_at <= :now AND {_PENDING_APPROVAL} "
    "RETURNING approval_id"
)
ESCALATIONS_DUE = (
    "SELECT approval_id FROM approval_reach WHERE escalated_at IS NULL "
    f"AND escalate_at IS NOT NULL AND escalate_at <= :now AND {_PENDING_APPROVAL} "
    "ORDER BY escalate_at LIMIT :limit"
)
CLAIM_ESCALATION = (
    "UPDATE approval_reach SET escalated_at = :now, dms_sent_at = NULL, "
    "dms_claimed_until = NULL, dms_retry_at = NULL, dms_attempts = 0 "
    "WHERE approval_id = :id AND escalated_at IS NULL "
    f"AND escalate_at IS NOT NULL AND escalate_at <= :now AND {_PENDING_APPROVAL} "
    "RETURNING escalate_to"
)
ESCALATE_APPROVERS = (
    "UPDATE approvals SET approvers = :approvers WHERE id = :id AND status = 'pending'"
)
ADD_APPROVER = (
    "INSERT INTO approval_approvers (approver, approval_id) VALUES (:approver, :approval_id) "
    "ON CONFLICT DO NOTHING"
)
REACH_OF = (
    "SELECT escalate_at, escalated_at, escalate_to FROM approval_reach WHERE approval_id = :id"
)
ADD_MESSAGE = (
    "INSERT INTO approval_messages (approval_id, recipient, kind, channel, ts, posted_at) "
    "VALUES (:approval_id, :recipient, :kind, :channel, :ts, :now) ON CONFLICT DO NOTHING"
)
MESSAGES_OF = (
    "SELECT recipient, channel, ts FROM approval_messages WHERE approval_id = :id "
    "ORDER BY posted_at, recipient"
)
MESSAGE_IN = "SELECT 1 FROM approval_messages WHERE approval_id = :id AND channel = :channel"

SAW_HOME = (
    "INSERT INTO home_viewers (team_id, user_id, opened_at) VALUES (:team_id, :user_id, :now) "
    "ON CONFLICT (team_id, user_id) DO UPDATE SET opened_at = excluded.opened_at"
)
HOME_VIEWERS = "SELECT user_id FROM home_viewers WHERE team_id = :team_id"
MARK_HOME = (
    "INSERT INTO home_dirty (team_id, user_id, since) VALUES (:team_id, :user_id, :now) "
    "ON CONFLICT (team_id, user_id) DO NOTHING"
)
CLAIM_HOMES = (
    "DELETE FROM home_dirty WHERE since <= :before AND team_id = :team_id "
    "AND user_id = :user_id RETURNING user_id"
)
DIRTY_HOMES = "SELECT team_id, user_id FROM home_dirty WHERE since <= :before LIMIT :limit"


@dataclass(frozen=True)
class ReachPlan:
    """What a policy asks of one approval's reach, snapshotted when it is requested."""

    remind_at: datetime | None = None
    escalate_at: datetime | None = None
    escalate_to: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReachState:
    """An approval's escalation as its card shows it; for a sender of its DM copies, the
    failed attempts so far and who will get no copy."""

    escalate_at: datetime | None
    escalated_at: datetime | None
    escalate_to: list[str]
    dms_attempts: int = 0
    dms_given_up: tuple[str, ...] = ()


@dataclass(frozen=True)
class CopyPlace:
    recipient: str
    channel: str
    ts: str


@dataclass(frozen=True)
class Escalation:
    approval: Approval
    added: list[str]


def reach_rows(rows: Sequence[dict[str, Any]], plans: dict[str, ReachPlan]) -> list[dict[str, Any]]:
    """``approval_reach`` rows for new approval rows: those that name approvers (their DM
    copies) or whose policy reminds or escalates."""
    out = []
    for row in rows:
        plan = plans.get(row["id"]) or ReachPlan()
        if row.get("kind", "approval") != "approval":
            continue
        if not row["approvers"] and plan == ReachPlan():
            continue
        out.append(
            {
                "approval_id": row["id"],
                "created_at": row["created_at"],
                "remind_at": plan.remind_at,
                "escalate_at": plan.escalate_at,
                "escalate_to": json.dumps(list(plan.escalate_to)),
            }
        )
    return out


def insert_reach(tx: Tx, rows: Sequence[dict[str, Any]], plans: dict[str, ReachPlan]) -> None:
    """Inside the pause's transaction: the reach rows of its new approvals."""
    reach = reach_rows(rows, plans)
    if reach:
        tx.executemany(INSERT_REACH, reach)


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

        return await self.database.run(body, WRITE)

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

        await self.database.run(body, WRITE)

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

        await self.database.run(body, WRITE)

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

        ids = await self.database.run(body, WRITE)
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
            if approval.approvers and added:
                approvers = [*approval.approvers, *added]
                tx.execute(
                    ESCALATE_APPROVERS, {"id": approval_id, "approvers": json_text(approvers)}
                )
                tx.executemany(
                    ADD_APPROVER, [{"approver": a, "approval_id": approval_id} for a in added]
                )
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

    # -- App Home ------------------------------------------------------------------------

    async def saw_home(self, team_id: str, user_id: str, *, now: datetime) -> None:
        def body(tx: Tx) -> None:
            tx.execute(SAW_HOME, {"team_id": team_id, "user_id": user_id, "now": now})

        await self.database.run(body, WRITE)

    async def home_viewers(self, team_id: str) -> set[str]:
        def body(tx: Tx) -> set[str]:
            return {row[0] for row in tx.all(HOME_VIEWERS, {"team_id": team_id})}

        return await self.database.run(body, READ_ONE)

    async def mark_homes(self, team_id: str, users: Collection[str], *, now: datetime) -> None:
        """These people's Homes show something that changed: publish them again."""
        rows = [{"team_id": team_id, "user_id": u, "now": now} for u in sorted(users)]

        def body(tx: Tx) -> None:
            tx.executemany(MARK_HOME, rows)

        if rows:
            await self.database.run(body, WRITE)

    async def claim_home(self, team_id: str, user_id: str, *, before: datetime) -> bool:
        """Take one Home to publish (marked before ``before``): one replica wins it."""
        params = {"team_id": team_id, "user_id": user_id, "before": before}

        def body(tx: Tx) -> bool:
            return tx.one(CLAIM_HOMES, params) is not None

        return await self.database.run(body, WRITE)

    async def dirty_homes(self, *, before: datetime, limit: int = 100) -> list[tuple[str, str]]:
        def body(tx: Tx) -> list[tuple[str, str]]:
            return [
                (row[0], row[1]) for row in tx.all(DIRTY_HOMES, {"before": before, "limit": limit})
            ]

        return await self.database.run(body, READ_ONE)
