"""The audit trail and the Slack event ids already handled.

Owns ``audit_events``, append-only: every change of every store appends its event with
:func:`audit`, inside the transaction that makes the change, so the trail never tells of a
change that did not commit nor misses one that did. Owns ``processed_events`` too: a Slack
event id is claimed once, by any replica, so a retried delivery starts nothing twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.models import AuditEvent
from storage.records import ApprovalDraft, ExportedEvent
from storage.sql.events import (
    AUDIT_PAGE,
    CLAIM_EVENT,
    FORGET_EVENTS,
    INSERT_AUDIT,
    RULE_MATCHED,
    audit_row,
    audit_trail_query,
)
from storage.stores.rows import AUDIT

WRITE, WRITE_ONE, READ, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ, Mode.READ_ONE


def asked_for(draft: ApprovalDraft) -> dict[str, Any]:
    """What the audit row of a call's approval being asked for says of the call (a pause's,
    a grant's, a Workflow step's), so every way of asking records the same fields."""
    return {
        "tool": draft.tool_name,
        "arguments": draft.arguments,
        "expires_at": draft.expires_at.isoformat(),
    }


def audit(tx: Tx, now: datetime, event: str, **fields: Any) -> None:
    """Append one event to the audit trail, inside the transaction that makes the change.

    Deferred (``Tx.defer``): no statement of a write transaction reads the audit trail, so on
    PostgreSQL the row rides on the transaction's next statement instead of a round trip of
    its own."""
    tx.defer(INSERT_AUDIT, [audit_row(now, event, **fields)])


class EventStore:
    database: Database

    # -- audit -------------------------------------------------------------------------

    async def audit_trail(
        self, *, run_id: str | None = None, approval_id: str | None = None
    ) -> list[AuditEvent]:
        sql, params = audit_trail_query(run_id=run_id, approval_id=approval_id)

        def body(tx: Tx) -> list[AuditEvent]:
            return [AUDIT.load(tx, row) for row in tx.all(sql, params)]

        return await self.database.run(body, READ_ONE, inline=False)

    async def record_rule_match(
        self,
        run_id: str,
        *,
        actor: str,
        tool: str,
        rule: str,
        when: str | None,
        approval: str,
        now: datetime,
        error: str | None = None,
    ) -> None:
        """Audit a rule on arguments that let a call run without a card or refused it (a
        rule that asks for approval is audited with the approval it asks for)."""

        def body(tx: Tx) -> None:
            audit(
                tx,
                now,
                RULE_MATCHED,
                run_id=run_id,
                actor=actor,
                tool=tool,
                rule=rule,
                when=when,
                approval=approval,
                error=error,
            )

        await self.database.run(body, WRITE)

    # -- runs --------------------------------------------------------------------------
    async def audit_page(
        self, *, since: datetime, until: datetime, after: int = 0, limit: int = 1000
    ) -> list[ExportedEvent]:
        """Up to ``limit`` events with ``since <= at < until`` and an id above ``after``,
        oldest id first: call again with the last id to stream the whole trail."""
        params = {"since": since, "until": until, "after": after, "limit": limit}
        width = len(AUDIT.names)

        def body(tx: Tx) -> list[ExportedEvent]:
            return [
                ExportedEvent(AUDIT.load(tx, row[:width]), row[width] or "", row[width + 1] or "")
                for row in tx.all(AUDIT_PAGE, params)
            ]

        return await self.database.run(body, READ_ONE, inline=False)

    # -- Slack event de-duplication ----------------------------------------------------

    async def claim_event(self, event_id: str, *, now: datetime) -> bool:
        """True the first time an event id is seen, by any replica; False for a redelivery."""

        def body(tx: Tx) -> bool:
            return tx.execute(CLAIM_EVENT, {"event_id": event_id, "now": now}) == 1

        return await self.database.run(body, WRITE_ONE)

    async def forget_events_before(self, cutoff: datetime) -> int:
        def body(tx: Tx) -> int:
            return tx.execute(FORGET_EVENTS, {"cutoff": cutoff})

        return await self.database.run(body, WRITE_ONE, inline=False)
